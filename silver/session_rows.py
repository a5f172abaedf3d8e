"""silver.session_rows: one row per (session, row id) with its current values.

The reconstructed tables themselves, queryable; the lineage is that of the record that
set the current values.
"""

from __future__ import annotations

from collections.abc import Iterable

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from lakehouse.core.tables import LINEAGE_COLUMNS, TableSpec
from lakehouse.storage import delta
from lakehouse.storage.delta import Txn
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
    resets: list[Reset] | None = None,
    held_before: bool | None = None,
) -> None:
    """Apply a batch of `silver.row_changes` rows (`rebuild`: to empty tables); `latest`,
    `resets` and `held_before`, where the caller has them, are already their
    `latest_changes`, `resets_of` and `any_held_before`.

    A session's table is what its last snapshot set, and what came after: a row set by a
    record before a snapshot of the batch that the snapshot did not set again is gone.
    The state machine deletes those rows it knows of; these it cannot know: a session id
    used again once its tombstone was forgotten starts a new session from nothing, and
    the old one's rows are still in this table (or earlier in the batch)."""
    rows = latest_changes(changes) if latest is None else latest
    spark = changes.sparkSession
    snapshots = resets_of(changes) if resets is None else resets
    if snapshots:
        reset = _reset_frame(spark, snapshots)
        rows = (
            rows.join(reset, on=list(SESSION), how="left")
            .where(_not_before_reset())
            .drop(*_RESET_AT)
        )
    if rebuild:
        delta.replace(rows.where("op <> 'delete'"), path, txn)
        return
    if snapshots:
        before = _held_before(spark, path, snapshots)
        # Nearly every snapshot opens a new session, with nothing held before it: one
        # light job says so, where the search below shuffles the batch's rows.
        if held_before is None:
            held_before = not before.isEmpty()
        if held_before:
            # A row the batch sets again is merged anyway.
            again = rows.select(*KEY)
            stale = before.join(again, on=list(KEY), how="left_anti").withColumn(
                "op", F.lit("delete")
            )
            rows = rows.unionByName(stale, allowMissingColumns=True)
    delta.merge(rows, path, KEY, txn, delete_when="s.op = 'delete'")


def any_held_before(spark: SparkSession, path: str, resets: list[Reset]) -> bool:
    """Whether the table at `path` holds a row of a session of `resets` set by a record
    before the session's last snapshot there (a session id used again once its tombstone
    was forgotten): the rows its snapshot ends. It reads the table alone, so a caller may
    ask it beside other work of the batch, before the batch's MERGE."""
    return bool(resets) and not _held_before(spark, path, resets).isEmpty()


def _held_before(spark: SparkSession, path: str, resets: list[Reset]) -> DataFrame:
    # Held rows of the reset sessions only: the sessions as literals let Delta skip the
    # files of others.
    held = (
        DeltaTable.forPath(spark, path)
        .toDF()
        .where(
            F.col("sensor_id").isin(sorted({s[0] for s in resets}))
            & F.col("session_id").isin(sorted({s[1] for s in resets}))
        )
        .join(_reset_frame(spark, resets), on=list(SESSION))
    )
    return held.where(~_not_before_reset()).drop(*_RESET_AT)


def _reset_frame(spark: SparkSession, resets: list[Reset]) -> DataFrame:
    return F.broadcast(spark.createDataFrame(resets, _RESET))


Reset = tuple[str, str, str, int, int]
"""(sensor_id, session_id, topic, partition, offset) of a session's last snapshot in a
batch."""


def resets_of(changes: DataFrame) -> list[Reset]:
    """Per session with a snapshot among `changes`, the lineage of its last one."""
    found = (
        changes.where("op = 'snapshot'")
        .groupBy(*SESSION, "topic", "partition")
        .agg(F.max("offset"))
        .collect()
    )
    return last_resets(tuple(r) for r in found)


def last_resets(found: Iterable[Reset]) -> list[Reset]:
    """Of snapshot lineages (any number per session), each session's last, by offset."""
    last: dict[tuple[str, str], Reset] = {}
    for reset in found:
        kept = last.get(reset[:2])
        if kept is None or reset[4] > kept[4]:
            last[reset[:2]] = reset
    return sorted(last.values())


SESSION = KEY[:2]
_RESET_AT = ("reset_topic", "reset_partition", "reset_offset")
_RESET = (
    "sensor_id STRING, session_id STRING, reset_topic STRING, reset_partition INT, "
    "reset_offset BIGINT"
)
"""Per session, the lineage of its last snapshot in the batch."""


def _not_before_reset() -> Column:
    """A row's lineage is not a record of its session's partition before its last snapshot."""
    return (
        F.col("reset_offset").isNull()
        | (F.col("topic") != F.col("reset_topic"))
        | (F.col("partition") != F.col("reset_partition"))
        | (F.col("offset") >= F.col("reset_offset"))
    )
