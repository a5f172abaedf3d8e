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
    grain="one row per (sensor_id, session_id, row_id)",
    columns=f"""
        sensor_id STRING NOT NULL COMMENT 'sensor of the session: the one its Kafka topic names',
        session_id STRING NOT NULL
            COMMENT 'session id as the sensor sent it (the Kafka key); unique per sensor only',
        row_id STRING NOT NULL COMMENT 'row of the session table, as the sensor names it',
        {protocol.VALUE_COLUMNS},
        seq BIGINT NOT NULL COMMENT 'seq of the record that set the current values',
        event_time TIMESTAMP COMMENT 'event_time of the record that set the current values (UTC)',
        {LINEAGE_COLUMNS}
    """,
    writer="the silver stream",
    # Merged row by row every batch: a change feed nothing reads would cost every MERGE,
    # and deletion vectors let a MERGE mark changed rows instead of rewriting their files.
    properties={"delta.enableDeletionVectors": "true"},
)
NAME = TABLE.name
KEY = ("sensor_id", "session_id", "row_id")


def latest_changes(changes: DataFrame) -> DataFrame:
    """One row per (session, row id): the last change of the batch, in seq order (in
    Kafka order where a lax integrity mode let two records share a seq)."""
    last_first = Window.partitionBy(*KEY).orderBy(
        F.desc("seq"), F.desc("offset"), F.desc("ordinal")
    )
    return (
        changes.withColumn("rank", F.row_number().over(last_first)).where("rank = 1").drop("rank")
    )


def write(
    changes: DataFrame,
    path: str,
    txn: Txn,
    latest: DataFrame | None = None,
    rebuild: bool = False,
) -> None:
    """Apply a batch of `silver.row_changes` rows (`rebuild`: to empty tables); `latest`,
    where the caller has it, is already their `latest_changes`."""
    rows = latest_changes(changes) if latest is None else latest
    if rebuild:
        delta.replace(rows.where("op <> 'delete'"), path, txn)
    else:
        delta.merge(rows, path, KEY, txn, delete_when="s.op = 'delete'")
