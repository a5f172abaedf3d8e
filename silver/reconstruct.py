"""The silver stream: bronze records -> per-session state machine -> the silver tables.

Bronze is read as a Delta stream and parsed in the JVM (`silver.parsing`); each record is
keyed by its session, (sensor, session id); `transformWithStateInPandas`, keyed by sensor,
hands each sensor's rows of a micro-batch to `SensorSessions`, which sorts them by Kafka
(partition, offset) and judges each session's by `silver.session_batch`; one
`foreachBatch` writes all silver tables, each write idempotent under the batch's Delta
transaction.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

from bronze import sensor_records
from lakehouse import catalog, delta, lease, positions, progress
from lakehouse.console import echo
from lakehouse.delta import Txn
from lakehouse.errors import LakehouseError
from lakehouse.quality import gates, store
from lakehouse.settings import Settings, SilverSettings
from lakehouse.streaming import (
    AfterBatch,
    RunStats,
    checkpoint_format,
    nothing_after_batch,
    run_foreach_batch,
)
from lakehouse.tables import TableSpec
from silver import (
    outputs,
    row_changes,
    session_batch,
    session_rows,
    sessions,
    state_transitions,
    violations,
)
from silver.parsing import UNKEYED, parse_records
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

QUERY_NAME = CHECKPOINT = "silver.sessions_stream"
TABLES = (*outputs.TABLES, session_rows.TABLE)
WRITES = (
    *(spec.name for spec in TABLES),
    store.quarantine_table("silver").name,
    store.results_table("silver").name,
    progress.progress_table("silver").name,
)
"""Every table the silver stream writes: on S3 it holds their leases while it runs."""
SESSION_KEY = "session_id STRING"
STATE_SCHEMA = (
    "version INT, status STRING, last_seq BIGINT, table_rows BIGINT, records BIGINT, "
    "has_snapshot BOOLEAN, deadline BIGINT, body STRING"
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
    parsed: DataFrame, silver: SilverSettings, topic_prefix: str, trace: frozenset[str] | None
) -> DataFrame:
    """One output row per row change, violation, trace step and touched session.

    State is held per sensor (the topic's): its sessions, keyed by session id, and what it
    holds against its bounds. `trace` is None (off), empty (every session) or sessions as
    `session_id` or `sensor/session_id`.
    """
    return (
        with_data_clock(parsed, silver.allowed_lateness_seconds)
        .groupBy("sensor_id")
        .transformWithStateInPandas(
            SensorSessions(silver, topic_prefix, trace), outputs.SCHEMA, "append", "EventTime"
        )
    )


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


@dataclass(frozen=True)
class Tally:
    """What a batch's outputs hold, counted in the one job that fills its cache."""

    rows: Counter[str]
    """Rows per table."""
    by_reason: Counter[str]
    """Violations by reason."""
    unread: list[tuple[str, int, int, int]]
    """(topic, partition, low, high): offsets of violations whose record's bytes did not
    reach Python (records read in the JVM), to be looked up in bronze."""


def tally(batch: DataFrame) -> Tally:
    """Count the batch's outputs: one small aggregate, so that a batch pays no job per
    table to learn that it has nothing for it."""
    violation = F.col("output") == violations.NAME
    bytes_unread = violation & F.get_json_object(outputs.OTHER, "$.raw_value").isNull()
    found = (
        batch.groupBy(
            "output",
            F.when(violation, F.get_json_object(outputs.OTHER, "$.reason")).alias("reason"),
            F.when(bytes_unread, F.col("topic")).alias("topic"),
            F.when(bytes_unread, F.col("partition")).alias("partition"),
        )
        .agg(
            F.count("*").alias("rows"), F.min("offset").alias("low"), F.max("offset").alias("high")
        )
        .collect()
    )
    rows, by_reason = Counter[str](), Counter[str]()
    for r in found:
        rows[r.output] += r.rows
        if r.reason is not None:
            by_reason[r.reason] += r.rows
    unread = [(r.topic, r.partition, r.low, r.high) for r in found if r.topic is not None]
    return Tally(rows, by_reason, unread)


def with_raw_values(
    rejected: DataFrame, bronze: DataFrame, ranges: list[tuple[str, int, int, int]]
) -> DataFrame:
    """Violations with the bytes of their record: records read in the JVM reach Python as
    typed columns only, so their bytes are looked up in bronze by lineage, in `ranges`
    (topic, partition, lowest and highest offset) of those lacking them."""
    if not ranges:
        return rejected
    missing = rejected.where(F.col("raw_value").isNull())
    # Offset ranges per partition let Delta skip the files that cannot hold them.
    near = F.lit(False)
    for topic, partition, low, high in ranges:
        near = near | (
            (F.col("topic") == topic)
            & (F.col("partition") == partition)
            & F.col("offset").between(low, high)
        )
    found = bronze.where(near).select("topic", "partition", "offset", F.col("value").alias("found"))
    filled = missing.join(found, ["topic", "partition", "offset"], "left").select(
        *[
            F.coalesce("found", "raw_value").alias(c) if c == "raw_value" else c
            for c in rejected.columns
        ]
    )
    return rejected.where(F.col("raw_value").isNotNull()).unionByName(filled)


def run(
    spark: SparkSession,
    settings: Settings,
    continuous: bool = False,
    trace: frozenset[str] | None = None,
    after_batch: AfterBatch = nothing_after_batch,
    full_refresh: bool = False,
    stop: threading.Event | None = None,
) -> RunStats:
    """Rebuild sessions from what bronze holds now (or until stopped, with `continuous`);
    `after_batch` runs in each batch once its writes are done, under the stream's leases.
    `full_refresh` starts a new checkpoint, whose first batch replaces silver's tables.
    `stop`: see `run_foreach_batch`."""
    checkpoint = settings.storage.checkpoint_uri(CHECKPOINT)
    with lease.holding(settings, WRITES, "the silver stream") as held:
        bronze_uri = settings.storage.table_uri(sensor_records.NAME)
        if not full_refresh:
            refuse_old_state(spark, checkpoint)
            read = positions.stream_source_id(spark, checkpoint)
            if read is not None and read != delta.table_id(spark, bronze_uri):
                echo("silver: bronze was rebuilt since silver last read it: rebuilding silver")
                full_refresh = True
        if full_refresh:
            fs, path = catalog.hadoop_fs(spark, checkpoint)
            fs.delete(path, True)
        uri = {spec.name: settings.storage.table_uri(spec.name) for spec in TABLES}
        delta.create_all(spark, {uri[spec.name]: spec for spec in TABLES})
        # A batch without data runs when the watermark moved, so that silent sessions
        # expire without waiting for more data; it moves only with data, so a run ends.
        spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")

        def sessions_from_bronze(max_files: int) -> DataFrame:
            bronze = (
                spark.readStream.format("delta")
                .option("maxFilesPerTrigger", max_files)
                .load(bronze_uri)
            )
            parsed = parse_records(bronze, settings.kafka.topic_prefix)
            return reconstruct_sessions(parsed, settings.silver, settings.kafka.topic_prefix, trace)

        bronze_now = spark.read.format("delta").load(
            settings.storage.table_uri(sensor_records.NAME)
        )
        gate_for = gates.stream_gates(spark, settings.quality, settings.storage, "silver")

        def write_tables(batch: DataFrame, txn: Txn, counted: Tally, written: set[str]) -> None:
            """Judge and write the tables of `written` (with `silver.session_rows` from the
            row changes) under the batch's transaction."""
            rebuild = txn.version == 0
            gate = gate_for(txn)
            selected = {
                spec.name: outputs.select(batch, spec, txn.version)
                for spec in (row_changes.TABLE, sessions.TABLE, violations.TABLE)
                if spec.name in written
            }
            if violations.NAME in selected:
                selected[violations.NAME] = with_raw_values(
                    selected[violations.NAME], bronze_now, counted.unread
                )
            admitted = {name: gate.admit(rows, name) for name, rows in selected.items()}
            gate.refuse_failures(batch.sparkSession)

            def append(spec: TableSpec) -> None:
                rows = admitted.get(spec.name)
                if rows is None:
                    rows = outputs.select(batch, spec, txn.version)
                (delta.replace if rebuild else delta.append)(rows, uri[spec.name], txn)

            def merge_rows() -> None:
                changes = admitted.get(row_changes.NAME)
                if changes is not None:
                    # The workers marked each row's last change; a gate that quarantined
                    # some changes leaves the rest to be ranked again.
                    latest = None
                    if changes is selected[row_changes.NAME]:
                        marked = batch.where(F.col(outputs.LATEST))
                        latest = outputs.select(marked, row_changes.TABLE, txn.version)
                    session_rows.write(changes, uri[session_rows.NAME], txn, latest, rebuild)

            def merge_sessions() -> None:
                if sessions.NAME in admitted:
                    sessions.write(admitted[sessions.NAME], uri[sessions.NAME], txn, rebuild)

            # The tables are independent: each is written by a thread of its own, so that
            # each one's planning and commits (mostly waiting, on storage and on the
            # driver) overlap the others' work. All write under the batch's one
            # transaction (the MERGEs read theirs from session settings, the same for
            # both), so none can give another a wrong one.
            appended = (row_changes.TABLE, violations.TABLE, state_transitions.TABLE)
            writes: list[Callable[[], None]] = [merge_rows, merge_sessions]
            writes.append(partial(gate.record, rebuild, batch.sparkSession))
            writes += [partial(append, spec) for spec in appended if spec.name in written]
            delta.side_by_side(writes)

        def write(batch: DataFrame, txn: Txn) -> None:
            held.check()
            # A checkpoint's first batch holds all of bronze (below): it replaces silver's
            # tables rather than adding to them, so that a rebuild (a new checkpoint, by
            # --full-refresh or a lost one) never leaves a row twice.
            rebuild = txn.version == 0
            # Every table and every expectation reads the same outputs: computed once.
            batch.persist()
            try:
                counted = tally(batch)
                progress.RECORDER.note(txn, violations=counted.by_reason)
                # Most batches that expire nothing and receive nothing (a batch the
                # watermark ran) have nothing to write: not a job more (a replay finds the
                # same nothing). A rebuild replaces every table, empty or not.
                written = {s.name for s in outputs.TABLES if rebuild or counted.rows[s.name]}
                if written:
                    write_tables(batch, txn, counted, written)
            finally:
                batch.unpersist()
            after_batch(txn.version, held)

        interval = settings.silver.trigger_interval if continuous else None
        # A new stream's first batches list bronze's files by modification time, not by
        # commit: out of Kafka order wherever commits share an instant (S3 keeps seconds)
        # or compaction rewrote old records into new files. Sessions are sorted within a
        # batch only, so a new checkpoint takes all of bronze in its first batch.
        limited = sessions_from_bronze(settings.silver.max_files_per_trigger)
        whole = partial(sessions_from_bronze, 2**31 - 1)
        recorded = ("silver", progress.create(spark, settings.storage, "silver"))
        return run_foreach_batch(
            limited, QUERY_NAME, checkpoint, write, interval, whole, recorded, stop
        )


def refuse_old_state(spark: SparkSession, checkpoint: str) -> None:
    """One line, before Spark says it in a trace, for a checkpoint older than this code's
    state: sessions held one per key and timed by the pipeline's clock (version 3)."""
    found = checkpoint_format(spark, checkpoint)
    if found is None:
        return
    names = []  # transformWithState keeps commit logs of format 2 only
    if found != "1":
        metadata = spark.read.format("state-metadata").load(checkpoint).collect()
        names = [r.operatorName for r in metadata]
    if not any(name.startswith("transformWithState") for name in names):
        raise LakehouseError(
            f"the silver checkpoint {checkpoint} holds state older than version "
            f"{STATE_VERSION} (sessions keyed by id alone, timed by the pipeline's clock), "
            "which cannot be carried over: rebuild silver with "
            "`lakehouse run silver --full-refresh`"
        )


def counts(spark: SparkSession, settings: Settings) -> tuple[dict[str, int], dict[str, int]]:
    """Sessions by status and violations by reason."""

    def grouped(table: str, column: str) -> dict[str, int]:
        frame = spark.read.format("delta").load(settings.storage.table_uri(table))
        return {r[column]: r["count"] for r in sorted(frame.groupBy(column).count().collect())}

    # Side by side: a run's last two jobs, each mostly its table's log read and planning.
    by_status, by_reason = delta.side_by_side(
        [partial(grouped, sessions.NAME, "status"), partial(grouped, violations.NAME, "reason")]
    )
    return by_status, by_reason


def summary(spark: SparkSession, settings: Settings, stats: RunStats) -> list[str]:
    """What a run ends with: sessions by status, violations by reason."""
    by_status, by_reason = counts(spark, settings)
    return [
        f"silver: +{stats.input_rows:,} bronze records in {stats.batches} batches "
        f"({stats.seconds:.1f}s)",
        f"  sessions by status:   {_pairs(by_status)}",
        f"  violations by reason: {_pairs(by_reason) or 'none'}",
    ]


def _pairs(counts: dict[str, int]) -> str:
    return ", ".join(f"{key}={value:,}" for key, value in counts.items())


def live_state(spark: SparkSession, settings: Settings) -> DataFrame:
    """One row per session held in the silver checkpoint's state store, as of its last batch."""
    checkpoint = settings.storage.checkpoint_uri(CHECKPOINT)
    # RocksDB state is loaded through the state store coordinator, which Spark only starts
    # with the streaming query manager: touch it in a session that runs no stream.
    spark.streams.active  # noqa: B018
    return (
        spark.read.format("statestore")
        .option("stateVarName", SESSIONS)
        .load(checkpoint)
        .select(
            F.col("key.sensor_id").alias("sensor_id"),
            F.col("user_map_key.session_id").alias("session_id"),
            F.col("user_map_value.status").alias("status"),
            F.col("user_map_value.last_seq").alias("last_seq"),
            F.col("user_map_value.table_rows").alias("table_rows"),
            F.col("user_map_value.records").alias("records"),
            F.col("user_map_value.has_snapshot").alias("has_snapshot"),
            F.timestamp_millis("user_map_value.deadline").alias("deadline"),
            F.col("user_map_value.version").alias("state_version"),
            F.length("user_map_value.body").alias("state_bytes"),
        )
    )
