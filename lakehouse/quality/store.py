"""Where validation leaves its mark: the results tables and the quarantine tables.

Every validation appends one row per expectation to its writer's results table (the view
`quality.expectation_results` unites them), so quality over time is a SQL query; rows a
`quarantine` expectation takes out of a table land, whole, in `<layer>.quarantine`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import reduce
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.core import versions
from lakehouse.core.settings import StorageSettings
from lakehouse.core.tables import TableSpec
from lakehouse.quality.suites import Check
from lakehouse.storage import catalog, delta

RESULT_COLUMNS = """
    run_id STRING NOT NULL COMMENT 'the stream run, gold run or check that validated',
    mode STRING NOT NULL
        COMMENT 'stream (a micro-batch), run (a gold model before it wrote) or check (a table)',
    layer STRING NOT NULL COMMENT 'layer of the validated table',
    table_name STRING NOT NULL COMMENT 'the validated table: silver.sessions',
    batch_id BIGINT COMMENT 'micro-batch of the stream; null for gold runs and checks',
    expectation STRING NOT NULL COMMENT 'name of the expectation in its suite',
    expectation_type STRING NOT NULL COMMENT 'Great Expectations type of the expectation',
    severity STRING NOT NULL COMMENT 'what its failure does: fail, quarantine or warn',
    success BOOLEAN NOT NULL COMMENT 'whether the expectation held',
    observed_value STRING COMMENT 'what Great Expectations observed, as JSON',
    unexpected_count BIGINT COMMENT 'rows that broke the expectation, where it judges rows',
    element_count BIGINT COMMENT 'rows validated',
    quarantined BIGINT COMMENT 'rows diverted to the layer quarantine; null if none were',
    validated_at TIMESTAMP NOT NULL COMMENT 'when the validation ran (UTC)'
"""
WRITERS = ("bronze", "silver", "gold", "check")
"""What validates: the two streams, gold's models before they write, `lakehouse check`."""
_WRITER_NAMES = {"gold": "lakehouse run gold", "check": "lakehouse check"}
RESULTS_VIEW = "quality.expectation_results"
"""Every writer's results as one view in the catalog, for SQL."""


def results_table(writer: str) -> TableSpec:
    """`quality.<writer>_expectation_results`: one table per validating application, so
    that each table has one writer (on S3, Delta's log is safe for one writer only)."""
    return TableSpec(
        name=f"quality.{writer}_expectation_results",
        grain="one row per expectation run on a micro-batch or a table",
        columns=RESULT_COLUMNS,
        writer=_WRITER_NAMES.get(writer, f"the {writer} stream"),
    )


def read_results(spark: SparkSession, storage: StorageSettings) -> DataFrame | None:
    """Every writer's results as one frame; None before any validation ran."""
    return catalog.read_united(spark, (storage.table_uri(results_table(w).name) for w in WRITERS))


def quarantine_table(layer: str) -> TableSpec:
    """`<layer>.quarantine`: one row per quarantined row: the whole row as JSON (binary
    columns base64, so bytes survive), the expectation that caught it, and its Kafka
    lineage to find it again."""
    return TableSpec(
        name=f"{layer}.quarantine",
        grain="one row per row a suite quarantined",
        columns="""
            table_name STRING NOT NULL COMMENT 'the table the row was kept out of',
            expectation STRING NOT NULL COMMENT 'the quarantine expectation that caught it',
            row_json STRING NOT NULL COMMENT 'the whole row as JSON, binary columns in base64',
            topic STRING COMMENT 'Kafka topic of the record the row comes from, if it has one',
            partition INT COMMENT 'Kafka partition of that record',
            offset BIGINT COMMENT 'Kafka offset of that record',
            batch_id BIGINT COMMENT 'micro-batch of the stream; null for a gold run',
            quarantined_at TIMESTAMP NOT NULL COMMENT 'when it was quarantined (UTC)'
        """,
        writer=_WRITER_NAMES.get(layer, f"the {layer} stream"),
    )


@dataclass(frozen=True)
class Outcome:
    """What one expectation found in one frame."""

    check: Check
    success: bool
    observed_value: str | None = None
    unexpected_count: int | None = None
    element_count: int | None = None
    quarantined: int | None = None
    first_at: str | None = None
    """Kafka lineage (`topic/partition@offset`) of the first offending row, where known."""

    @property
    def found(self) -> str:
        """What the expectation saw, e.g. `unexpected 3, quarantined 3`."""
        return ", ".join(
            f"{label} {value:,}" if isinstance(value, int) else f"{label} {value}"
            for label, value in (
                ("unexpected", self.unexpected_count),
                ("observed", self.observed_value),
                ("quarantined", self.quarantined),
                ("first at", self.first_at),
            )
            # a query expectation observes its count of unexpected rows: say it once
            if value is not None
            and not (label == "observed" and value == str(self.unexpected_count))
        )

    def describe(self) -> str:
        found = self.found
        return f"{self.check.name} ({self.check.severity})" + (f": {found}" if found else "")


def create_tables(
    spark: SparkSession, storage: StorageSettings, writer: str, layers: Sequence[str]
) -> None:
    """The writer's results table and the quarantine tables of `layers`; the view over
    every writer's results."""
    specs = (results_table(writer), *(quarantine_table(layer) for layer in layers))
    results = storage.table_uri(results_table(writer).name)
    new = not catalog.is_delta(spark, results)
    delta.create_all(spark, {storage.table_uri(spec.name): spec for spec in specs})
    # The view names every writer's table there is: made again when one is new (or the
    # catalog lost it), not on every start of a job.
    if not versions.is_versioned(results) and (new or not spark.catalog.tableExists(RESULTS_VIEW)):
        names = [results_table(w).name for w in WRITERS]
        catalog.unite(spark, RESULTS_VIEW, {name: storage.table_uri(name) for name in names})


def quarantine_frame(offending: DataFrame, table: str, check: Check) -> DataFrame:
    """`offending` in the columns of the quarantine table as caught by `check`, but for
    the batch's own values, which `quarantined` adds."""
    lineage = [
        F.col(c) if c in offending.columns else F.lit(None).cast(t).alias(c)
        for c, t in (("topic", "string"), ("partition", "int"), ("offset", "bigint"))
    ]
    return offending.select(
        F.lit(table).alias("table_name"),
        F.lit(check.name).alias("expectation"),
        F.to_json(F.struct(*offending.columns)).alias("row_json"),
        *lineage,
    )


def quarantined(caught: Sequence[DataFrame], batch_id: int | None) -> DataFrame:
    """The rows `quarantine_frame` made of a batch, as the quarantine table holds them."""
    rows = reduce(DataFrame.unionByName, caught)
    return delta.stamped(
        rows, ("batch_id", "bigint", batch_id), ("quarantined_at", "timestamp", datetime.now(UTC))
    )


def results_frame(
    spark: SparkSession,
    run_id: str,
    mode: str,
    layer: str,
    outcomes: dict[str, list[Outcome]],
    batch_id: int | None,
) -> DataFrame:
    """One row per expectation run, in the columns of the results tables."""
    return spark.createDataFrame(
        result_rows(run_id, mode, layer, outcomes, batch_id), RESULT_COLUMNS
    )


def result_rows(
    run_id: str, mode: str, layer: str, outcomes: dict[str, list[Outcome]], batch_id: int | None
) -> list[tuple[Any, ...]]:
    """`results_frame`'s rows, validated now."""
    now = datetime.now(UTC)
    return [
        (
            run_id,
            mode,
            table.split(".", 1)[0] if layer == "*" else layer,
            table,
            batch_id,
            o.check.name,
            o.check.type,
            o.check.severity,
            o.success,
            o.observed_value,
            o.unexpected_count,
            o.element_count,
            o.quarantined,
            now,
        )
        for table, table_outcomes in outcomes.items()
        for o in table_outcomes
    ]


def new_run_id() -> str:
    return f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"


def quarantined_rows(
    spark: SparkSession, storage: StorageSettings, table: str, schema: str
) -> DataFrame:
    """The rows the table's suite quarantined, restored to the table's own `schema`,
    with the expectation that caught each."""
    layer = table.split(".", 1)[0]
    return (
        spark.read.format("delta")
        .load(storage.table_uri(quarantine_table(layer).name))
        .where(F.col("table_name") == table)
        .select("expectation", F.from_json("row_json", schema).alias("row"))
        .select("row.*", "expectation")
    )


def quarantine_counts(spark: SparkSession, storage: StorageSettings, table: str) -> dict[str, int]:
    """Rows of `table` in its layer's quarantine, by the expectation that caught them."""
    path = storage.table_uri(quarantine_table(table.split(".", 1)[0]).name)
    if not catalog.is_delta(spark, path):
        return {}
    counts = (
        spark.read.format("delta")
        .load(path)
        .where(F.col("table_name") == table)
        .groupBy("expectation")
        .count()
        .collect()
    )
    return {row["expectation"]: row["count"] for row in sorted(counts)}
