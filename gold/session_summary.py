"""gold.session_summary: one row per capture session (sensor, session id), with the Kafka
lineage of its ends.

From `silver.sessions` (status, counters, times, lineage) and `silver.violations` (how
many of its records were rejected, counted from the rejections themselves).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakehouse.graph.models import model
from silver import sessions, violations

NAME = "gold.session_summary"
KEY = ("sensor_id", "session_id")
"""A session is (sensor, session id): two sensors may number their sessions alike."""
COLUMNS = """
    sensor_id STRING NOT NULL COMMENT 'sensor of the session: the one its Kafka topic names',
    session_id STRING NOT NULL
        COMMENT 'session id as the sensor sent it (the Kafka key); unique per sensor only',
    status STRING NOT NULL
        COMMENT 'open, closed (by an end), expired (timed out) or broken (until a snapshot)',
    started_at TIMESTAMP
        COMMENT 'event_time of the first record with a readable one, even if rejected (UTC)',
    ended_at TIMESTAMP
        COMMENT 'event_time of the latest record (Kafka order) with a readable one (UTC)',
    duration_seconds DOUBLE
        COMMENT 'ended_at minus started_at in seconds (to the microsecond); null if either is',
    records BIGINT NOT NULL COMMENT 'records of the session so far, accepted or rejected',
    snapshots BIGINT NOT NULL COMMENT 'snapshot records applied: the opening one and resyncs',
    updates BIGINT NOT NULL COMMENT 'update records applied (upserts and deletes)',
    final_rows BIGINT NOT NULL
        COMMENT 'rows of the reconstructed table now; as it ended once closed or expired',
    gaps BIGINT NOT NULL COMMENT 'times seq skipped ahead of the next expected one',
    violations BIGINT NOT NULL
        COMMENT 'rows of silver.violations for this sensor and session id (rejections); 0 if none',
    first_seq BIGINT COMMENT 'seq of the first record applied; null if none was applied',
    last_seq BIGINT COMMENT 'highest seq applied so far; null if none was applied',
    first_topic STRING COMMENT 'Kafka topic of the first record of the session',
    first_partition INT COMMENT 'Kafka partition of the first record of the session',
    first_offset BIGINT COMMENT 'Kafka offset of the first record of the session',
    last_topic STRING COMMENT 'Kafka topic of the latest record of the session',
    last_partition INT COMMENT 'Kafka partition of the latest record of the session',
    last_offset BIGINT COMMENT 'Kafka offset of the latest record of the session'
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
