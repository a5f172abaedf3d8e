"""`gold.model_runs`: one row per model per run, the versions of its inputs it read; where
each model's next incremental run starts, and what a check binds a reconciliation to."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse.core.settings import StorageSettings
from lakehouse.core.tables import TableSpec

RUNS = TableSpec(
    name="gold.model_runs",
    grain="one row per model per run",
    columns="""
        run_id STRING NOT NULL COMMENT 'the gold run (one command) the model ran in',
        model STRING NOT NULL COMMENT 'the model, by table name: gold.sensor_hourly',
        mode STRING NOT NULL COMMENT 'full, incremental, or unchanged (no input changed)',
        source_versions MAP<STRING, BIGINT> NOT NULL
            COMMENT 'the Delta version of each input the run read: where the next one starts',
        source_ids MAP<STRING, STRING> NOT NULL
            COMMENT 'the Delta table id of each input: a new id means the input was recreated',
        changed_keys BIGINT COMMENT 'keys an incremental run recomputed; null for a full one',
        rows_written BIGINT NOT NULL COMMENT 'rows overwritten (full) or merged (incremental)',
        started_at TIMESTAMP NOT NULL COMMENT 'when the model began (UTC)',
        seconds DOUBLE NOT NULL COMMENT 'how long the model took'
    """,
    writer="lakehouse run gold",
)


def last_versions(
    spark: SparkSession, storage: StorageSettings
) -> dict[str, dict[str, tuple[int, str]]]:
    """Per model, source -> (version, table id) its last run processed: one read of the
    run log for the whole run."""
    runs = spark.read.format("delta").load(storage.table_uri(RUNS.name))
    latest = runs.groupBy("model").agg(
        F.max_by(F.struct("source_versions", "source_ids"), "started_at").alias("last")
    )
    return {
        row["model"]: {
            name: (int(version), row["last"]["source_ids"].get(name, ""))
            for name, version in row["last"]["source_versions"].items()
        }
        for row in latest.collect()
    }
