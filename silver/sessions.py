"""silver.sessions: one row per session — status, seq range, counts, times, lineage.

`topic`/`partition`/`offset` are the lineage of the last record that changed the
session; `first_*` of the first.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakehouse.streaming import Txn, retry_on_conflict
from silver import tables

NAME = "silver.sessions"
STATUSES = ("open", "closed", "expired", "broken")
COLUMNS = """
    session_id STRING NOT NULL, sensor_id STRING, status STRING NOT NULL,
    first_seq BIGINT, last_seq BIGINT, records BIGINT NOT NULL, snapshots BIGINT NOT NULL,
    updates BIGINT NOT NULL, rejected BIGINT NOT NULL,
    gaps BIGINT NOT NULL COMMENT 'times seq skipped ahead of the next expected one',
    table_rows BIGINT NOT NULL, first_event_time TIMESTAMP, last_event_time TIMESTAMP,
    first_topic STRING, first_partition INT, first_offset BIGINT, updated_batch_id BIGINT NOT NULL
"""


def select_sessions(outputs: DataFrame, batch_id: int) -> DataFrame:
    """One row per session touched in the batch, as it stands after the batch."""
    return outputs.where(F.col("output") == "session").select(
        "session_id", "sensor_id", F.col("session_status").alias("status"), "first_seq",
        "last_seq", "records", "snapshots", "updates", "rejected", "gaps", "table_rows",
        F.timestamp_micros("first_event_time").alias("first_event_time"),
        F.timestamp_micros("last_event_time").alias("last_event_time"),
        "first_topic", "first_partition", "first_offset",
        F.lit(batch_id).cast("bigint").alias("updated_batch_id"), "topic", "partition", "offset",
    )  # fmt: skip


def write(touched: DataFrame, path: str, txn: Txn) -> None:
    """Upsert the sessions of a batch (rows of `select_sessions`)."""
    # foreachBatch hands over a frame of its own session: views and MERGE must use it.
    spark = touched.sparkSession
    touched.createOrReplaceTempView("silver_sessions_batch")
    with tables.merge_txn(spark, txn):
        retry_on_conflict(
            lambda: spark.sql(f"""
            MERGE INTO delta.`{path}` AS t USING silver_sessions_batch AS s
            ON t.session_id = s.session_id
            WHEN MATCHED THEN UPDATE SET *
            WHEN NOT MATCHED THEN INSERT *
        """),
            NAME,
        )
