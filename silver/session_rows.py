"""silver.session_rows: one row per (session, row id) with its current values.

The reconstructed tables themselves, queryable; the lineage is that of the record that
set the current values.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from lakehouse.streaming import Txn, retry_on_conflict
from silver import protocol, tables

NAME = "silver.session_rows"
COLUMNS = f"""
    session_id STRING NOT NULL, sensor_id STRING, row_id STRING NOT NULL,
    {protocol.VALUE_COLUMNS}, seq BIGINT NOT NULL, event_time TIMESTAMP
"""


def latest_changes(changes: DataFrame) -> DataFrame:
    """One row per (session, row id): the last change of the batch, in seq order."""
    last_first = Window.partitionBy("session_id", "row_id").orderBy(
        F.desc("seq"), F.desc("ordinal")
    )
    return (
        changes.withColumn("rank", F.row_number().over(last_first)).where("rank = 1").drop("rank")
    )


def write(changes: DataFrame, path: str, txn: Txn) -> None:
    """Apply a batch of `silver.row_changes` rows."""
    # foreachBatch hands over a frame of its own session: views and MERGE must use it.
    spark = changes.sparkSession
    latest = latest_changes(changes)
    latest.createOrReplaceTempView("silver_session_rows_changes")
    with tables.merge_txn(spark, txn):
        retry_on_conflict(
            lambda: spark.sql(f"""
            MERGE INTO delta.`{path}` AS t USING silver_session_rows_changes AS s
            ON t.session_id = s.session_id AND t.row_id = s.row_id
            WHEN MATCHED AND s.op = 'delete' THEN DELETE
            WHEN MATCHED THEN UPDATE SET
                sensor_id = s.sensor_id, temperature = s.temperature, humidity = s.humidity,
                pressure = s.pressure, status = s.status, counter = s.counter, seq = s.seq,
                event_time = s.event_time, topic = s.topic, partition = s.partition,
                offset = s.offset
            WHEN NOT MATCHED AND s.op != 'delete' THEN INSERT (
                session_id, sensor_id, row_id, temperature, humidity, pressure, status,
                counter, seq, event_time, topic, partition, offset
            ) VALUES (
                s.session_id, s.sensor_id, s.row_id, s.temperature, s.humidity, s.pressure,
                s.status, s.counter, s.seq, s.event_time, s.topic, s.partition, s.offset
            )
        """),
            NAME,
        )
