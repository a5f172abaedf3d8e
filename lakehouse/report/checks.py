"""The reports of the checks (`lakehouse report`): the Data Docs site built from the
stored results, and the terminal summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from lakehouse.core.settings import Settings
from lakehouse.quality import store
from lakehouse.quality.checks import gx_context
from lakehouse.report import data_docs


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

    lines += _stream_totals(results)

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


def _stream_totals(results: DataFrame) -> list[str]:
    """Each table's in-stream validation over every run: batches, failures, quarantined."""
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
    if not stream_rows:
        return []
    lines = ["in-stream validation (all runs):"]
    for r in stream_rows:
        lines.append(
            f"  {r.table_name:<28} {r.batches:>6,} batches  {r.failures:>6,} failed "
            f"expectations  {r.quarantined:>8,} rows quarantined"
        )
    return lines
