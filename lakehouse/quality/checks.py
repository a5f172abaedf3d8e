"""Batch validation of whole tables (`lakehouse check`) and the reports (`lakehouse report`).

A check validates each table with full detail in a file-backed Great Expectations project
under `quality.local_dir`, so that its results feed the Data Docs site, and appends the
results to its own results table, as each stream does to its own.

A check reads its table and inputs each at one Delta version, so its outcome is a function
of those versions and the suite: a process that checked the same versions with the same
suite before gives that outcome again without a Spark job (an idle pipeline's scheduled
checks), unless the suite reads the clock.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.core.console import echo
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings
from lakehouse.quality import store
from lakehouse.quality.gates import input_views
from lakehouse.quality.store import Outcome
from lakehouse.quality.suites import Suite
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
    reused: bool = False
    """The outcome of an earlier check of the same versions with the same suite."""

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.success]

    def describe(self) -> str:
        """`5/6 passed (2.1s)`."""
        passed = len(self.outcomes) - len(self.failed)
        return f"{passed}/{len(self.outcomes)} passed ({self.seconds:.1f}s)"

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
        self.run_id = store.new_run_id()

    @cached_property
    def validator(self) -> Validator:
        """Made on the first validation, with the results tables: a walk whose checks all
        find their tables unchanged reuses outcomes, and pays for neither (the file
        context alone costs about half a second)."""
        layers = sorted({s.layer for s in self.suites.values()})
        store.create_tables(self.spark, self.settings.storage, "check", layers)
        return Validator(list(self.suites.values()), context=gx_context(self.settings))

    def check(
        self, table: str, since: str | None = None, echo: Callable[[str], None] = echo
    ) -> TableCheck | None:
        """Validate `table` as it is now (rows at or after `since` by its time column), and
        record the results; None when the table is not built yet. A suite that reconciles
        the table with its inputs reads each as the table's last run did (a gold model's,
        in `gold.model_runs`), else as it is now. The same versions, suite and window
        checked before in this process: that outcome again, not recorded again."""
        suite = self.suites[table]
        path = self.settings.storage.table_uri(table)
        if not catalog.is_delta(self.spark, path):
            echo(f"  {table:<28} not built yet, skipped ({path})")
            return None
        pinned = delta.latest(self.spark, path)
        frame = self.spark.read.format("delta").option("versionAsOf", pinned.version).load(path)
        window = ""
        if since and suite.time_column:
            frame = frame.where(F.col(suite.time_column) >= F.lit(since).cast("timestamp"))
            window = f" since {since} by {suite.time_column}"
        elif since:
            window = " (whole table: the suite names no time_column)"
        versions = self._built_from(table) if suite.inputs else {}
        inputs = {name: self._input(table, name, versions) for name in suite.inputs}
        started = time.monotonic()
        read = (path, pinned.table_id, pinned.version, repr(suite), since,
                tuple((name, i.id, i.version) for name, i in inputs.items()))  # fmt: skip
        if (known := _CHECKED.get(table)) is not None and known[0] == read:
            check = replace(known[1], seconds=time.monotonic() - started, reused=True)
            outcome = f"unchanged since its last check (version {pinned.version}), "
        else:
            check, outcome = self._validate(suite, frame, inputs), ""
            if not _reads_the_clock(suite):
                _CHECKED[table] = read, check
        echo(f"  {table:<28} {check.rows:>12,} rows{window}: {outcome}{check.describe()}")
        for failed in check.failed:
            echo(f"      FAILED {failed.describe()}")
        return check

    def _validate(self, suite: Suite, frame: DataFrame, inputs: Mapping[str, _Input]) -> TableCheck:
        """Run `suite` over `frame` and append its outcomes to the check results."""
        started = time.monotonic()
        frame.persist()
        try:
            rows = frame.count()
            views = input_views({n: (i.frame, i.version) for n, i in inputs.items()})
            outcomes = self.validator.validate_and_store(frame, suite.table, self.run_id, views)
        finally:
            frame.unpersist()
        found = store.results_frame(
            self.spark, self.run_id, "check", "*", {suite.table: outcomes}, None
        )
        delta.append(found, self.settings.storage.table_uri(store.results_table("check").name))
        return TableCheck(suite, rows, outcomes, time.monotonic() - started)

    def _built_from(self, table: str) -> dict[str, int]:
        """The version of each input the table's last run read, if a model built it."""
        if not catalog.is_delta(self.spark, self.settings.storage.table_uri(RUNS.name)):
            return {}
        read = last_versions(self.spark, self.settings.storage).get(table, {})
        return {name: version for name, (version, _) in read.items()}

    def _input(self, table: str, name: str, versions: Mapping[str, int]) -> _Input:
        """A table `table`'s suite reads besides it: at `versions[name]`, else at its
        latest version. A quarantine not made yet holds no rows; any other missing table
        is an error."""
        uri = self.settings.storage.table_uri(name)
        if not catalog.is_delta(self.spark, uri):
            layer = name.split(".", 1)[0]
            if name == store.quarantine_table(layer).name:
                empty = store.quarantine_table(layer).columns
                return _Input(self.spark.createDataFrame([], empty), "", -1)
            raise LakehouseError(f"{table}'s suite reads {name}, which is not built yet ({uri})")
        latest = delta.latest(self.spark, uri)
        version = versions.get(name, latest.version)
        reader = self.spark.read.format("delta").option("versionAsOf", version)
        return _Input(reader.load(uri), latest.table_id, version)


@dataclass(frozen=True)
class _Input:
    """A table a suite reads besides its own, as one version of it."""

    frame: DataFrame
    id: str
    version: int


_CHECKED: dict[str, tuple[tuple[object, ...], TableCheck]] = {}
"""Per table, the last check this process made and what it read: the table's and each
input's (location, Delta id, version), the suite and the window."""

_CLOCK = re.compile(
    r"\b(current_\w+|now|localtimestamp|curdate|curtime|rand\w*|uuid)\b|\bunix_timestamp\s*\(\s*\)",
    re.IGNORECASE,
)


def _reads_the_clock(suite: Suite) -> bool:
    """Whether an expectation may judge the same rows differently from one run to the
    next (a freshness query reads the time): its outcome is never reused."""
    return any(_CLOCK.search(json.dumps(check.kwargs)) for check in suite.checks)
