"""Silver's stateful processor: each sensor's sessions, held in Spark's state store and
judged record by record, in Kafka order, by `silver.session_batch`.

`reconstruct_sessions` keys the parsed bronze records by sensor and hands each sensor's
rows of a micro-batch to `SensorSessions` (`transformWithStateInPandas`), on a clock of
the data's own time (`with_data_clock`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

from lakehouse.core.settings import SilverSettings
from silver import outputs, session_batch
from silver.parsing import UNKEYED
from silver.protocol import VALUE_NAMES
from silver.session_machine import (
    STATE_VERSION,
    Clock,
    Mode,
    Output,
    Policy,
    Reason,
    SessionMachine,
    SessionState,
)

SESSION_KEY = "session_id STRING"
STATE_SCHEMA = (
    "version INT, status STRING, last_seq BIGINT, table_rows BIGINT, records BIGINT, "
    "has_snapshot BOOLEAN, deadline BIGINT, body BINARY"
)
"""A held session: a few plain columns beside the JSON body make `lakehouse inspect`
readable, and let the sensor's eviction scan skip the body."""
SENSOR_SCHEMA = "held BIGINT, without_snapshot BIGINT"
"""What the sensor holds, for its bounds."""
SESSIONS, SENSOR = "sessions", "sensor"
"""The state variables of each sensor's key."""
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
        # pandas' timestamps end in 2262
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
        ",".join(t.name for t in outputs.TABLES),
    )
    clocked = with_data_clock(keyed, silver.allowed_lateness_seconds)
    return DataFrame(sessions.reconstruct(clocked._jdf, processor), spark)


class SensorSessions(StatefulProcessor):
    """One sensor's sessions, each judged by `silver.session_batch`, timed by `Clock`."""

    def __init__(
        self, silver: SilverSettings, topic_prefix: str, trace: frozenset[str] | None
    ) -> None:
        self.silver, self.topic_prefix, self.trace = silver, topic_prefix, trace
        self.clock = Clock(silver.session_timeout_seconds * 1000)
        self.bounds = silver.bounds
        self.state_schema = STATE_SCHEMA  # as the driver has it, which Spark checks

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.sessions = handle.getMapState(SESSIONS, SESSION_KEY, self.state_schema)
        self.held = handle.getValueState(SENSOR, SENSOR_SCHEMA)

    def machine_for(self, sensor: str, session_id: str) -> SessionMachine:
        rule = self.silver.rule_for(self.topic_prefix + sensor)
        trace = self.trace
        traced = trace is not None and (
            not trace or session_id in trace or f"{sensor}/{session_id}" in trace
        )
        return SessionMachine(
            Mode(rule.mode), Policy(rule.policy), rule.window, traced,
            self.bounds.rows_per_session,
        )  # fmt: skip

    def handleInputRows(
        self, key: tuple[Any, ...], rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        sensor = str(key[0])
        # Spark hands a key's rows over in no order and in several chunks; Kafka
        # (partition, offset) is the order the sensor sent them in, a re-created topic's
        # after the old one's (`TOPIC~N`, bronze/kafka_changes.py).
        batch = pd.concat(list(rows), ignore_index=True)
        order = ["partition", "offset", "pos"]
        if batch["topic"].nunique() == 1:  # the sensor's one topic: no incarnation to read
            batch = batch.sort_values(order, ignore_index=True)
        else:
            incarnation = batch["topic"].str.extract(r"~([0-9]+)$", expand=False)
            batch["incarnation"] = incarnation.fillna("1").astype(int)
            batch = batch.sort_values(["incarnation", *order], ignore_index=True)
            batch = batch.drop(columns="incarnation")
        now = timerValues.getCurrentWatermarkInMs()
        held, without = self.holding()
        deadlines: list[int] = []
        refused: dict[tuple[Reason, str], list[pd.DataFrame]] = {}
        # Sessions in the order of their first record: who meets a bound first is decided
        # by the data, not by the order of a hash.
        for session_id, records in batch.groupby("session_id", sort=False):
            session_id = str(session_id)
            if session_id == UNKEYED:
                yield session_batch.unkeyed(records, sensor)
                continue
            found = self.sessions.getValue((session_id,))
            if found is None:
                refusal = self.refusal(records, held, without)
                if refusal is not None:
                    refused.setdefault(refusal, []).append(records)
                    continue
                session = SessionState(session_id, sensor)
            else:
                session = load_state(found)
            before = session.has_snapshot
            machine = self.machine_for(sensor, session_id)
            frames, session, judged = session_batch.judge(
                machine, session, records, sensor, self.clock
            )
            yield from frames
            if not judged:
                continue  # its state stays as it was
            expired = Output()
            kept = self.clock.advance(machine, session, now, expired)
            yield session_batch.to_frame(expired, session)
            if found is None:
                bounded = self.bounds.sessions_without_snapshot
                if not kept or (not session.has_snapshot and without >= bounded):
                    continue  # judged, but not held: a snapshot it opened with was refused
                held, without = held + 1, without + (not session.has_snapshot)
            elif not kept:
                held, without = held - 1, without - (not before)
                self.sessions.removeKey((session_id,))
                continue
            else:
                without += int(before) - int(session.has_snapshot)
            self.sessions.updateValue((session_id,), save_state(session, self.clock))
            deadlines.append(self.clock.deadline(session))
        # A flood of sessions a bound keeps out is rejected in one frame per reason.
        for (reason, detail), parts in refused.items():
            yield session_batch.rejected(pd.concat(parts), sensor, reason, detail)
        self.held.update((held, without))
        self.wake_at(min(deadlines, default=None), now)

    def holding(self) -> tuple[int, int]:
        """Sessions the sensor holds, and of them those without a snapshot."""
        found = self.held.get()
        return (int(found[0]), int(found[1])) if found else (0, 0)

    def refusal(self, rows: pd.DataFrame, held: int, without: int) -> tuple[Reason, str] | None:
        """Why a session the sensor does not hold yet is kept out, if a bound says so."""
        bounds = self.bounds
        if held >= bounds.sessions_per_sensor:
            return Reason.SESSIONS_BOUND, (
                "the sensor holds as many sessions as silver.bounds.sessions_per_sensor "
                f"({bounds.sessions_per_sensor:,})"
            )
        opens = bool(rows["plain"].iat[0]) and rows["kind"].iat[0] == "snapshot"
        if not opens and without >= bounds.sessions_without_snapshot:
            return Reason.NO_SNAPSHOT_BOUND, (
                "the sensor holds as many sessions without a snapshot as "
                "silver.bounds.sessions_without_snapshot "
                f"({bounds.sessions_without_snapshot:,})"
            )
        return None

    def handleExpiredTimer(
        self, key: tuple[Any, ...], timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        """The watermark passed the earliest deadline among the sensor's sessions: move
        every one to it (a scan of what the sensor holds, which its bounds keep small)."""
        sensor = str(key[0])
        now = timerValues.getCurrentWatermarkInMs()
        held, without = self.holding()
        deadlines = []
        for (session_id,), found in list(self.sessions.iterator()):
            if found[6] >= now:  # its deadline: nothing happens to it yet
                deadlines.append(found[6])
                continue
            session = load_state(found)
            status = session.status
            expired = Output()
            kept = self.clock.advance(self.machine_for(sensor, session_id), session, now, expired)
            if session.status is not status:  # expired (and maybe forgotten at once)
                yield session_batch.to_frame(expired, session)
            if kept:
                self.sessions.updateValue((session_id,), save_state(session, self.clock))
                deadlines.append(self.clock.deadline(session))
            else:
                held, without = held - 1, without - (not session.has_snapshot)
                self.sessions.removeKey((session_id,))
        self.held.update((held, without))
        self.wake_at(min(deadlines, default=None), now)

    def wake_at(self, deadline: int | None, now: int) -> None:
        """Keep one timer per sensor, at its earliest deadline. A timer below the watermark
        `now` fires in this batch and is then deleted by Spark: it does not count."""
        if deadline is None:
            return
        timers = [t for t in self.handle.listTimers() if t >= now]
        if timers and min(timers) <= deadline:
            return
        for timer in timers:
            self.handle.deleteTimer(timer)
        self.handle.registerTimer(deadline)

    def close(self) -> None:
        pass


def save_state(session: SessionState, clock: Clock) -> tuple[Any, ...]:
    return (
        STATE_VERSION,
        str(session.status),
        session.last_seq,
        session.table_rows,
        session.records,
        session.has_snapshot,
        clock.deadline(session),
        session.to_json(),
    )


def load_state(row: tuple[Any, ...]) -> SessionState:
    version = row[0]
    if version != STATE_VERSION:
        raise RuntimeError(
            f"STATE_VERSION_MISMATCH: the checkpoint holds silver state version {version}, "
            f"this code reads version {STATE_VERSION}: lakehouse run silver --full-refresh"
        )
    return SessionState.from_json(row[-1])
