"""silver.violations: one row per rejected record — why, expected vs found seq, raw bytes."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

NAME = "silver.violations"
COLUMNS = """
    session_id STRING, sensor_id STRING, reason STRING NOT NULL, detail STRING,
    expected_seq BIGINT, found_seq BIGINT, raw_value BINARY, batch_id BIGINT NOT NULL
"""


def select_violations(outputs: DataFrame, batch_id: int) -> DataFrame:
    """One row per rejected record, with the Kafka lineage to find it in bronze."""
    return outputs.where(F.col("output") == "violation").select(
        "session_id", "sensor_id", "reason", "detail", "expected_seq", "found_seq", "raw_value",
        F.lit(batch_id).cast("bigint").alias("batch_id"), "topic", "partition", "offset",
    )  # fmt: skip
