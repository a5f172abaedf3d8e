"""silver.state_transitions: one row per record of a traced session — the state before and
after it (`--trace`), for finding where a reconstruction went wrong."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

NAME = "silver.state_transitions"
COLUMNS = """
    session_id STRING NOT NULL, seq BIGINT, ordinal BIGINT NOT NULL, action STRING NOT NULL,
    before STRING, after STRING, batch_id BIGINT NOT NULL
"""


def select_transitions(outputs: DataFrame, batch_id: int) -> DataFrame:
    """One row per traced transition; `before`/`after` are JSON summaries of the session."""
    return outputs.where(F.col("output") == "transition").select(
        "session_id", "seq", "ordinal", "action", "before", "after",
        F.lit(batch_id).cast("bigint").alias("batch_id"), "topic", "partition", "offset",
    )  # fmt: skip
