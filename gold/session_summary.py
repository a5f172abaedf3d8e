"""gold.session_summary: one row per capture session (sensor, session id), with the Kafka
lineage of its ends.

From `silver.sessions` (status, counters, times, lineage) and `silver.violations` (how
many of its records were rejected, counted from the rejections themselves).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakehouse.incremental import model
from silver import sessions, violations

NAME = "gold.session_summary"
KEY = ("sensor_id", "session_id")
"""A session is (sensor, session id): two sensors may number their sessions alike."""
COLUMNS = """
    sensor_id STRING NOT NULL, session_id STRING NOT NULL, status STRING NOT NULL,
    started_at TIMESTAMP, ended_at TIMESTAMP, duration_seconds DOUBLE,
    records BIGINT NOT NULL, snapshots BIGINT NOT NULL, updates BIGINT NOT NULL,
    final_rows BIGINT NOT NULL,
    gaps BIGINT NOT NULL COMMENT 'times seq skipped ahead of the next expected one',
    violations BIGINT NOT NULL,
    first_seq BIGINT, last_seq BIGINT,
    first_topic STRING, first_partition INT, first_offset BIGINT,
    last_topic STRING, last_partition INT, last_offset BIGINT
"""


def changed_sessions(session_changes: DataFrame, violation_changes: DataFrame) -> DataFrame:
    """Every session with a changed summary or a new violation."""
    changed = session_changes.select(*KEY).unionByName(violation_changes.select(*KEY))
    return changed.where(F.col("session_id").isNotNull())


def of_sessions(keys: DataFrame, *inputs: DataFrame) -> tuple[DataFrame, ...]:
    """Both inputs cut down to the given sessions."""
    return tuple(frame.join(keys, list(KEY), "left_semi") for frame in inputs)


@model(
    reads=(sessions.NAME, violations.NAME),
    key=KEY,
    columns=COLUMNS,
    changed_keys=changed_sessions,
    narrow=of_sessions,
    cluster_by=("sensor_id", "started_at"),
)
def session_summary(silver_sessions: DataFrame, silver_violations: DataFrame) -> DataFrame:
    """One row per capture session, from `silver.sessions` and `silver.violations`.

    `started_at`/`ended_at` are the event times of its first and last accepted records;
    `final_rows` the rows of its reconstructed table now; `violations` its rejected
    records; `first_*`/`last_*` the Kafka lineage of its first and latest records.
    """
    rejected = (
        silver_violations.where(F.col("session_id").isNotNull())
        .groupBy(*KEY)
        .agg(F.count("*").alias("violations"))
    )
    started, ended = F.col("first_event_time"), F.col("last_event_time")
    return silver_sessions.join(rejected, list(KEY), "left").select(
        "sensor_id",
        "session_id",
        "status",
        started.alias("started_at"),
        ended.alias("ended_at"),
        ((F.unix_micros(ended) - F.unix_micros(started)) / 1e6).alias("duration_seconds"),
        "records",
        "snapshots",
        "updates",
        F.col("table_rows").alias("final_rows"),
        "gaps",
        F.coalesce("violations", F.lit(0)).cast("bigint").alias("violations"),
        "first_seq",
        "last_seq",
        "first_topic",
        "first_partition",
        "first_offset",
        F.col("topic").alias("last_topic"),
        F.col("partition").alias("last_partition"),
        F.col("offset").alias("last_offset"),
    )
