"""Batch validation of whole tables (`lakehouse check`) and the reports (`lakehouse report`).

A check validates each table with full detail in a file-backed Great Expectations project
under `quality.local_dir`, so that its results feed the Data Docs site, and appends the
results to its own results table, as each stream does to its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.core.console import echo
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings
from lakehouse.quality import store
from lakehouse.quality.gates import input_views
from lakehouse.quality.store import Outcome
from lakehouse.quality.suites import Suite, load_suites
from lakehouse.quality.validator import Validator
from lakehouse.storage import catalog, delta
from lakehouse.storage.model_runs import RUNS, last_versions


@dataclass(frozen=True)
class TableCheck:
    """The outcome of one table's suite over the table (or a window of it)."""

    suite: Suite
    rows: int
    outcomes: list[Outcome]
    seconds: float

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.success]

    @property
    def blocking(self) -> bool:
        """A `fail` expectation failed: the table is not fit to use."""
        return any(o.check.severity == "fail" for o in self.failed)


def gx_context(settings: Settings) -> Any:
    import great_expectations as gx

    return gx.get_context(mode="file", project_root_dir=settings.quality.gx_dir)


class Checker:
    """Validates whole tables, one at a time, with one Great Expectations context (kept
    on file for the Data Docs) and one run id; results go to `quality.check_*`."""

    def __init__(self, spark: SparkSession, settings: Settings, suites: Sequence[Suite]) -> None:
        self.spark, self.settings = spark, settings
        self.suites = {s.table: s for s in suites}
        store.create_tables(spark, settings.storage, "check", sorted({s.layer for s in suites}))
        self.validator = Validator(suites, context=gx_context(settings))
        self.run_id = store.new_run_id()

    def check(
        self, table: str, since: str | None = None, echo: Callable[[str], None] = echo
    ) -> TableCheck | None:
        """Validate `table` as it is now (rows at or after `since` by its time column), and
        record the results; None when the table is not built yet. A suite that reconciles
        the table with its inputs reads each as the table's last run did (a gold model's,
        in `gold.model_runs`), else as it is now."""
        suite, storage = self.suites[table], self.settings.storage
        path = storage.table_uri(table)
        if not catalog.is_delta(self.spark, path):
            echo(f"  {table:<28} not built yet, skipped ({path})")
            return None
        frame = self.spark.read.format("delta").load(path)
        window = ""
        if since and suite.time_column:
            frame = frame.where(F.col(suite.time_column) >= F.lit(since).cast("timestamp"))
            window = f" since {since} by {suite.time_column}"
        elif since:
            window = " (whole table: the suite names no time_column)"
        versions = self._built_from(table) if suite.inputs else {}
        inputs = {
            name: (self._input(table, name, versions), versions.get(name, -1))
            for name in suite.inputs
        }
        started = time.monotonic()
        frame.persist()
        try:
            rows = frame.count()
            outcomes = self.validator.validate_and_store(
                frame, table, self.run_id, input_views(inputs)
            )
        finally:
            frame.unpersist()
        check = TableCheck(suite, rows, outcomes, time.monotonic() - started)
        passed = len(outcomes) - len(check.failed)
        echo(
            f"  {table:<28} {rows:>12,} rows{window}: {passed}/{len(outcomes)} passed "
            f"({check.seconds:.1f}s)"
        )
        for outcome in check.failed:
            echo(f"      FAILED {outcome.describe()}")
        found = store.results_frame(self.spark, self.run_id, "check", "*", {table: outcomes}, None)
        delta.append(found, storage.table_uri(store.results_table("check").name))
        return check

    def _built_from(self, table: str) -> dict[str, int]:
        """The version of each input the table's last run read, if a model built it."""
        if not catalog.is_delta(self.spark, self.settings.storage.table_uri(RUNS.name)):
            return {}
        read = last_versions(self.spark, self.settings.storage).get(table, {})
        return {name: version for name, (version, _) in read.items()}

    def _input(self, table: str, name: str, versions: Mapping[str, int]) -> DataFrame:
        """A table `table`'s suite reads besides it: at `versions[name]`, else as it is now.
        A quarantine not made yet holds no rows; any other missing table is an error."""
        uri = self.settings.storage.table_uri(name)
        if not catalog.is_delta(self.spark, uri):
            layer = name.split(".", 1)[0]
            if name == store.quarantine_table(layer).name:
                return self.spark.createDataFrame([], store.quarantine_table(layer).columns)
            raise LakehouseError(f"{table}'s suite reads {name}, which is not built yet ({uri})")
        reader = self.spark.read.format("delta")
        if name in versions:
            reader = reader.option("versionAsOf", versions[name])
        return reader.load(uri)


def check_tables(
    spark: SparkSession,
    settings: Settings,
    select: str | None = None,
    since: str | None = None,
    echo: Callable[[str], None] = echo,
) -> list[TableCheck]:
    """Validate every selected table that exists; results go to the results table."""
    suites = load_suites(settings.quality.suites_dir, select)
    checker = Checker(spark, settings, suites)
    found = [checker.check(s.table, since, echo) for s in suites]
    return [c for c in found if c is not None]
