"""`gold.model_runs`: one row per model per run, the versions of its inputs it read; where
each model's next incremental run starts, and what a check binds a reconciliation to."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse.core.settings import StorageSettings
from lakehouse.core.tables import TableSpec
from lakehouse.storage import delta

RUNS = TableSpec(
    name="gold.model_runs",
    grain="one row per model per run",
    columns="""
        run_id STRING NOT NULL COMMENT 'the gold run (one command) the model ran in',
        model STRING NOT NULL COMMENT 'the model, by table name: gold.sensor_hourly',
        mode STRING NOT NULL COMMENT 'full or incremental (a run that found no input changed
            is in ops.gold_progress only)',
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


LastVersions = dict[str, dict[str, tuple[int, str]]]
"""Per model, source -> (Delta version, table id) its last run processed."""


def last_versions(spark: SparkSession, storage: StorageSettings) -> LastVersions:
    """What each model's last run processed: one read of the run log for the whole run,
    and none while the log has no new commit (an idle pipeline's scheduled runs)."""
    uri = storage.table_uri(RUNS.name)
    log = delta.latest(spark, uri)
    key = (log.table_id, log.version)
    if (known := _READ.get(uri)) is None or known[0] != key:
        runs = spark.read.format("delta").option("versionAsOf", log.version).load(uri)
        latest = runs.groupBy("model").agg(
            F.max_by(F.struct("source_versions", "source_ids"), "started_at").alias("last")
        )
        known = _READ[uri] = (
            key,
            {
                row["model"]: {
                    name: (int(version), row["last"]["source_ids"].get(name, ""))
                    for name, version in row["last"]["source_versions"].items()
                }
                for row in latest.collect()
            },
        )
    return {model: dict(read) for model, read in known[1].items()}


def appended(spark: SparkSession, storage: StorageSettings, read: LastVersions) -> None:
    """Note that this process appended runs that read `read` to the run log: where that
    append is the one commit after the log as last read, the log is known without reading
    it again (a walk's runs after another walk's)."""
    uri = storage.table_uri(RUNS.name)
    if (known := _READ.pop(uri, None)) is None:
        return
    (table_id, version), before = known
    log = delta.latest(spark, uri)
    if (log.table_id, log.version) == (table_id, version + 1):
        _READ[uri] = (table_id, log.version), {**before, **read}


_READ: dict[str, tuple[tuple[str, int], LastVersions]] = {}
"""The run log as last read, per location, with the version it was read at: a version's
rows never change, so a reader that finds the same version needs no Spark job."""
