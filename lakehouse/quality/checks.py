"""Batch validation of whole tables (`lakehouse check`) and the reports (`lakehouse report`).

A check validates each table with full detail in a file-backed Great Expectations project
under `quality.local_dir`, so that its results feed the Data Docs site, and appends the
results to its own results table, as each stream does to its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from lakehouse import catalog, delta
from lakehouse.console import echo
from lakehouse.errors import LakehouseError
from lakehouse.incremental import RUNS, last_versions
from lakehouse.quality import data_docs, store
from lakehouse.quality.gates import input_views
from lakehouse.quality.store import Outcome
from lakehouse.quality.suites import Suite, load_suites
from lakehouse.quality.validator import Validator
from lakehouse.settings import Settings


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


def build_data_docs(settings: Settings) -> Path:
    """Render the Data Docs site from the stored check results; the path of its index."""
    context = gx_context(settings)
    context.build_data_docs()
    index = Path(context.get_docs_sites_urls()[0]["site_url"].removeprefix("file://"))
    data_docs.make_self_contained(index.parent)
    return index


def latest_checks(spark: SparkSession, settings: Settings) -> dict[str, list[dict[str, Any]]]:
    """Per table, the results of its latest check, one dict per expectation."""
    results = store.read_results(spark, settings.storage)
    if results is None:
        return {}
    checks = results.where("mode = 'check'")
    newest = F.max("validated_at").over(Window.partitionBy("table_name"))
    latest = checks.withColumn("newest", newest).where("validated_at = newest")
    found: dict[str, list[dict[str, Any]]] = {}
    for row in latest.collect():
        found.setdefault(row.table_name, []).append(row.asDict())
    return found


def summary(spark: SparkSession, settings: Settings, worst: int = 5) -> list[str]:
    """Terminal lines: each table's latest check, stream validation totals, worst failures."""
    results = store.read_results(spark, settings.storage)
    if results is None:
        return ["no validation results yet: run a layer or `lakehouse check`"]
    lines = []
    checks = results.where("mode = 'check'")
    newest = F.max("validated_at").over(Window.partitionBy("table_name"))
    last_check = checks.withColumn("newest", newest).where("validated_at = newest").drop("newest")
    tables = last_check.groupBy("table_name").agg(
        F.count("*").alias("total"),
        F.sum(F.when(~F.col("success"), 1).otherwise(0)).alias("failed"),
        F.sum(F.when(~F.col("success") & (F.col("severity") == "fail"), 1).otherwise(0)).alias(
            "blocking"
        ),
        F.max("validated_at").alias("at"),
    )
    lines.append("latest check per table:")
    for r in tables.orderBy("table_name").collect():
        state = "FAIL" if r.blocking else ("WARN" if r.failed else "PASS")
        lines.append(
            f"  {state:<4} {r.table_name:<28} {r.total - r.failed}/{r.total} expectations "
            f"passed  ({r.at:%Y-%m-%d %H:%M:%S} UTC)"
        )
    if not tables.head(1):
        lines.append("  none yet: run `lakehouse check`")

    streams = (
        results.where("mode = 'stream'")
        .groupBy("table_name")
        .agg(
            F.countDistinct("run_id", "batch_id").alias("batches"),
            F.sum(F.when(~F.col("success"), 1).otherwise(0)).alias("failures"),
            F.sum(F.coalesce("quarantined", F.lit(0))).alias("quarantined"),
        )
    )
    stream_rows = streams.orderBy("table_name").collect()
    if stream_rows:
        lines.append("in-stream validation (all runs):")
        for r in stream_rows:
            lines.append(
                f"  {r.table_name:<28} {r.batches:>6,} batches  {r.failures:>6,} failed "
                f"expectations  {r.quarantined:>8,} rows quarantined"
            )

    failures = (
        last_check.where("NOT success")
        .withColumn(
            "rank",
            F.when(F.col("severity") == "fail", 0)
            .when(F.col("severity") == "quarantine", 1)
            .otherwise(2),
        )
        .orderBy("rank", F.desc_nulls_last("unexpected_count"))
        .limit(worst)
        .collect()
    )
    if failures:
        lines.append("worst failures of the latest checks:")
        for r in failures:
            count = f"{r.unexpected_count:,} unexpected" if r.unexpected_count is not None else ""
            lines.append(f"  [{r.severity}] {r.table_name}.{r.expectation}  {count}".rstrip())
    return lines
