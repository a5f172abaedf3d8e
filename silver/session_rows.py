"""silver.session_rows: one row per (session, row id) with its current values.

The reconstructed tables themselves, queryable; the lineage is that of the record that
set the current values.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from lakehouse import delta
from lakehouse.delta import Txn
from lakehouse.tables import LINEAGE_COLUMNS, TableSpec
from silver import protocol

TABLE = TableSpec(
    name="silver.session_rows",
    grain="one row per (session, row id)",
    columns=f"""
        session_id STRING NOT NULL, sensor_id STRING, row_id STRING NOT NULL,
        {protocol.VALUE_COLUMNS}, seq BIGINT NOT NULL, event_time TIMESTAMP, {LINEAGE_COLUMNS}
    """,
    writer="the silver stream",
    # Merged row by row every batch: a change feed nothing reads would cost every MERGE,
    # and deletion vectors let a MERGE mark changed rows instead of rewriting their files.
    properties={"delta.enableDeletionVectors": "true"},
)
NAME = TABLE.name


def latest_changes(changes: DataFrame) -> DataFrame:
    """One row per (session, row id): the last change of the batch, in seq order (in
    Kafka order where a lax integrity mode let two records share a seq)."""
    last_first = Window.partitionBy("session_id", "row_id").orderBy(
        F.desc("seq"), F.desc("offset"), F.desc("ordinal")
    )
    return (
        changes.withColumn("rank", F.row_number().over(last_first)).where("rank = 1").drop("rank")
    )


def write(changes: DataFrame, path: str, txn: Txn, latest: DataFrame | None = None) -> None:
    """Apply a batch of `silver.row_changes` rows; `latest`, where the caller has it, is
    already their `latest_changes`."""
    key = ("session_id", "row_id")
    rows = latest_changes(changes) if latest is None else latest
    delta.merge(rows, path, key, txn, delete_when="s.op = 'delete'")
