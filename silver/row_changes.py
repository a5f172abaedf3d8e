"""silver.row_changes: one row per table row changed by an accepted record.

The changelog of every reconstructed table: replaying it in (session, seq, ordinal)
order rebuilds `silver.session_rows`.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from silver import protocol

NAME = "silver.row_changes"
COLUMNS = f"""
    session_id STRING NOT NULL, sensor_id STRING, row_id STRING NOT NULL,
    op STRING NOT NULL, {protocol.VALUE_COLUMNS}, seq BIGINT NOT NULL, ordinal BIGINT NOT NULL,
    event_time TIMESTAMP, batch_id BIGINT NOT NULL
"""


def select_row_changes(outputs: DataFrame, batch_id: int) -> DataFrame:
    """One row per changed table row, `op` in insert | update | delete | snapshot."""
    return outputs.where(F.col("output") == "change").select(
        "session_id", "sensor_id", "row_id", "op", *protocol.VALUE_NAMES, "seq", "ordinal",
        F.timestamp_micros("event_time").alias("event_time"),
        F.lit(batch_id).cast("bigint").alias("batch_id"), "topic", "partition", "offset",
    )  # fmt: skip
