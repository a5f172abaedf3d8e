"""Silver's stateful processor: each sensor's sessions, held in Spark's state store and
judged record by record, in Kafka order, by the session machine in the JVM.

`reconstruct_sessions` keys the parsed bronze records by sensor and hands each sensor's
rows of a micro-batch to `SensorSessions` (`jvm/src/lakehouse/silver/SensorSessions.java`,
through `transformWithState`), on a clock of the data's own time (`with_data_clock`). The
Java machine is a port of `silver.session_machine`, which stays its specification: a
property test holds their outputs and states equal.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakehouse.core.settings import SilverSettings
from silver import outputs
from silver.protocol import VALUE_NAMES
from silver.session_state import STATE_VERSION

STATE_SCHEMA = (
    "version INT, status STRING, last_seq BIGINT, table_rows BIGINT, records BIGINT, "
    "has_snapshot BOOLEAN, deadline BIGINT, body BINARY"
)
"""A held session: a few plain columns beside its body (the Java `SessionState`,
serialized) make `lakehouse inspect` readable, and let the sensor's eviction scan skip
the body."""
SENSOR_SCHEMA = "held BIGINT, without_snapshot BIGINT"
"""What the sensor holds, for its bounds."""
SESSIONS = "sessions"
"""The state variable of each sensor's sessions, as `SensorSessions.java` names it."""
CLOCK_COLUMN = "kafka_clock"
LATE_GUARD = "late_guard"


def with_data_clock(parsed: DataFrame, lateness_seconds: int) -> DataFrame:
    """The parsed records with the stream's event-time watermark on their Kafka timestamps,
    each counted no later than bronze ingested it (`clock_time`).

    Kafka timestamps rather than event times: every record has one, a record silver cannot
    read included, and a sensor's broken clock (event times up to 2099 are valid) cannot
    push the watermark ahead and end every session. A producer's clock stamps the Kafka
    timestamp too, and the broker accepts it up to an hour ahead: bounded by ingestion, a
    producer ahead moves the clock only as far as real time, and ends no other sensor's
    session while bronze keeps up (docs/operations.md). An honest record is never later
    than its ingestion, so the bound changes nothing for it however late the pipeline
    reads. Only the watermark is bounded: a session's own clock is its records' Kafka
    time, so a sensor's wrong clock times its own sessions alone.

    Spark drops rows older than the watermark before a stateful operator sees them,
    silently; a late record must instead reach its session and be judged by its own time.
    Spark recognises the watermark column by its metadata: the real clock column only
    feeds the watermark and is dropped, and the operator is shown a column that carries
    that metadata but is never older than any watermark, so nothing is dropped."""
    delay = f"{lateness_seconds} seconds"
    delay_ms = lateness_seconds * 1000
    return (
        parsed.withColumn(CLOCK_COLUMN, F.timestamp_millis("clock_time"))
        .drop("clock_time")
        .withWatermark(CLOCK_COLUMN, delay)
        .withColumn(LATE_GUARD, F.lit("2262-01-01").cast("timestamp"))
        .withMetadata(LATE_GUARD, {"spark.watermarkDelayMs": delay_ms})
        .drop(CLOCK_COLUMN)
    )


def reconstruct_sessions(
    keyed: DataFrame, silver: SilverSettings, topic_prefix: str, trace: frozenset[str] | None
) -> DataFrame:
    """One output row per row change, violation, trace step and touched session.

    State is held per sensor (the topic's): its sessions, keyed by session id, and what it
    holds against its bounds, judged by the session machine in the JVM
    (`jvm/src/lakehouse/silver/SensorSessions.java`). `trace` is None (off), empty (every
    session) or sessions as `session_id` or `sensor/session_id`.
    """
    spark = keyed.sparkSession
    sessions = spark._jvm.lakehouse.silver.SensorSessions  # type: ignore[union-attr]
    bounds = silver.bounds
    processor = sessions(
        "".join(f"{r.topics}\t{r.mode}\t{r.policy}\t{r.window}\n" for r in silver.integrity),
        topic_prefix,
        None if trace is None else "\n".join(sorted(trace)),
        silver.session_timeout_seconds * 1000,
        bounds.rows_per_session,
        bounds.sessions_per_sensor,
        bounds.sessions_without_snapshot,
        outputs.SCHEMA,
        STATE_SCHEMA,
        SENSOR_SCHEMA,
        ",".join(VALUE_NAMES),
        STATE_VERSION,
        ",".join(t.name for t in outputs.OUTPUT_TABLES),
    )
    clocked = with_data_clock(keyed, silver.allowed_lateness_seconds)
    return DataFrame(sessions.reconstruct(clocked._jdf, processor), spark)
