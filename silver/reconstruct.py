"""The silver stream: bronze records -> per-session state machine -> the silver tables.

Bronze is read as a Delta stream; each record is keyed by the `session_id` in its value;
`applyInPandasWithState` hands each session's records of a micro-batch to
`SessionMachine` after sorting them by Kafka (partition, offset); one `foreachBatch`
writes all silver tables, each write idempotent under the batch's Delta transaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from lakehouse import quality
from lakehouse.settings import Settings, SilverSettings
from lakehouse.streaming import RunStats, Txn, append, run_foreach_batch
from silver import (
    protocol,
    row_changes,
    session_rows,
    sessions,
    state_transitions,
    tables,
    violations,
)
from silver.session_machine import (
    STATE_VERSION,
    IntegrityError,
    Lineage,
    Mode,
    Output,
    Policy,
    Reason,
    Record,
    SessionMachine,
    SessionState,
    Status,
    Violation,
    parse_record,
)

LAYER = "silver"
QUERY_NAME = "silver.sessions_stream"
TABLES = {
    "row_changes": row_changes,
    "session_rows": session_rows,
    "sessions": sessions,
    "violations": violations,
    "state_transitions": state_transitions,
}
STATE_SCHEMA = (
    "version INT, status STRING, last_seq BIGINT, table_rows BIGINT, records BIGINT, body STRING"
)
# Times travel as microseconds since the epoch: the protocol has checked them already, and
# `timestamp_micros` cannot fail on content the way a string cast can.
OUTPUT_SCHEMA = f"""
    output STRING, session_id STRING, sensor_id STRING, row_id STRING, op STRING,
    {protocol.VALUE_COLUMNS},
    seq BIGINT, ordinal BIGINT, event_time BIGINT, topic STRING, partition INT, offset BIGINT,
    reason STRING, detail STRING, expected_seq BIGINT, found_seq BIGINT, raw_value BINARY,
    session_status STRING, first_seq BIGINT, last_seq BIGINT, records BIGINT, snapshots BIGINT,
    updates BIGINT, rejected BIGINT, gaps BIGINT, table_rows BIGINT, first_event_time BIGINT,
    last_event_time BIGINT, first_topic STRING, first_partition INT, first_offset BIGINT,
    action STRING, before STRING, after STRING
"""
_PANDAS_TYPES = {"BIGINT": "Int64", "INT": "Int64", "DOUBLE": "float64"}
OUTPUT_DTYPES = {
    name: _PANDAS_TYPES.get(kind, "object")
    for name, kind in (column.split() for column in OUTPUT_SCHEMA.replace("\n", " ").split(","))
}
"""Pandas types that Arrow converts to OUTPUT_SCHEMA exactly: the frame is typed inside
the state function, where a failure can still become a violation, not after it."""


UNKEYED = ""
"""The group of records no session can claim (no usable session_id): rejected, no state."""


def key_records(bronze: DataFrame) -> DataFrame:
    """Bronze records with the session they belong to, UNKEYED when the value names none
    that the protocol allows (an id that would key state must be a bounded, printable id)."""
    session_id = F.get_json_object(F.col("value").cast("string"), "$.session_id")
    usable = F.when(session_id.rlike(protocol.ID_PATTERN), session_id)
    return bronze.select(
        F.coalesce(usable, F.lit(UNKEYED)).alias("session_id"),
        "topic",
        "partition",
        "offset",
        "key",
        "value",
    )


def reconstruct_sessions(
    keyed: DataFrame, silver: SilverSettings, topic_prefix: str, trace: frozenset[str] | None
) -> DataFrame:
    """One output row per row change, violation, trace step and touched session.

    A topic `<topic_prefix><sensor>` holds that sensor's records only. `trace` is None
    (off), empty (every session) or the session ids to trace.
    """
    timeout_ms = silver.session_timeout_seconds * 1000

    def machine_for(topic: str, session_id: str) -> SessionMachine:
        rule = silver.rule_for(topic)
        traced = trace is not None and (not trace or session_id in trace)
        return SessionMachine(Mode(rule.mode), Policy(rule.policy), rule.window, traced)

    def records_of(session_id: str, batch: pd.DataFrame) -> list[Record]:
        return [
            parse_record(
                session_id,
                raw,
                Lineage(topic, int(partition), int(offset)),
                key,
                topic[len(topic_prefix) :] if topic.startswith(topic_prefix) else None,
            )
            for topic, partition, offset, key, raw in zip(
                batch["topic"], batch["partition"], batch["offset"], batch["key"], batch["value"],
                strict=True,
            )
        ]  # fmt: skip

    def on_session(
        key: tuple[Any, ...], chunks: Iterable[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        session_id = str(key[0])
        if state.hasTimedOut:
            session = load_state(state.get)
            state.remove()
            if session.status is not Status.CLOSED:
                machine_for(_topic(session), session_id).expire(session)
                yield to_frame(Output(), session)
            return
        # Spark hands a group's rows over in no order and in several chunks; Kafka
        # (partition, offset) is the order the sensor sent them in.
        batch = pd.concat(list(chunks), ignore_index=True).sort_values(["partition", "offset"])
        records = records_of(session_id, batch)
        if session_id == UNKEYED:
            yield to_frame(Output(violations=[unkeyed_violation(r) for r in records]))
            return
        session = load_state(state.get) if state.exists else SessionState(session_id)
        topic = _topic(session) if session.first_lineage else records[0].lineage.topic
        machine = machine_for(topic, session_id)
        try:
            out = machine.process(session, records)
            frame = to_frame(out, session)
        except IntegrityError:
            raise
        except Exception as error:
            # Outside the per-record guard (typing the output, say): the batch's records
            # become violations and the state stays as it was, so the session goes on as
            # if they had never come: its next record shows the gap.
            frame = to_frame(Output(violations=internal_violations(records, error)))
            if machine.policy is Policy.FAIL:
                raise IntegrityError(f"session {session_id}: {frame.loc[0, 'detail']}") from None
            yield frame
            return
        # A closed session stays until the timeout, so that a record after its end is
        # rejected as such in any later batch rather than opening a new session.
        state.update(save_state(session))
        state.setTimeoutDuration(timeout_ms)
        yield frame

    return keyed.groupBy("session_id").applyInPandasWithState(
        on_session,
        OUTPUT_SCHEMA,
        STATE_SCHEMA,
        "append",
        GroupStateTimeout.ProcessingTimeTimeout,
    )


def unkeyed_violation(record: Record) -> Violation:
    """A record that names no usable session: rejected for what parsing found."""
    reason, detail = record.problem or Reason.INVALID, record.detail or "no session_id"
    return Violation(None, record.sensor_id, reason, detail, None, None, record.lineage, record.raw)


def internal_violations(records: list[Record], error: Exception) -> list[Violation]:
    detail = f"handling the session's batch failed: {type(error).__name__}: {error}"[:500]
    return [
        Violation(r.session_id, r.sensor_id, Reason.INTERNAL, detail, None, r.seq, r.lineage, r.raw)
        for r in records
    ]


def _topic(session: SessionState) -> str:
    return session.first_lineage.topic if session.first_lineage else ""


def save_state(session: SessionState) -> tuple[Any, ...]:
    # A few plain columns beside the JSON body make `lakehouse inspect` readable.
    return (
        STATE_VERSION,
        str(session.status),
        session.last_seq,
        session.table_rows,
        session.records,
        session.to_json(),
    )


def load_state(row: tuple[Any, ...]) -> SessionState:
    version = row[0]
    if version != STATE_VERSION:
        raise RuntimeError(
            f"STATE_VERSION_MISMATCH: the checkpoint holds silver state version {version}, this "
            f"code reads version {STATE_VERSION}; rebuild silver from bronze on a new checkpoint"
        )
    return SessionState.from_json(row[5])


def to_rows(out: Output, session: SessionState | None) -> list[dict[str, Any]]:
    """The machine's output as rows of OUTPUT_SCHEMA, the session's summary last."""
    rows: list[dict[str, Any]] = []
    for change in out.changes:
        rows.append(
            {
                "output": "change",
                "session_id": change.session_id,
                "sensor_id": change.sensor_id,
                "row_id": change.row_id,
                "op": change.op,
                **(change.values or {}),
                "seq": change.seq,
                "event_time": change.event_time,
                **_lineage(change.lineage),
            }
        )
    for v in out.violations:
        rows.append(
            {
                "output": "violation",
                "session_id": v.session_id,
                "sensor_id": v.sensor_id,
                "reason": str(v.reason),
                "detail": v.detail,
                "expected_seq": v.expected_seq,
                "found_seq": v.found_seq,
                "raw_value": v.raw,
                **_lineage(v.lineage),
            }
        )
    for t in out.transitions:
        rows.append(
            {
                "output": "transition",
                "session_id": t.session_id,
                "seq": t.seq,
                "action": t.action,
                "before": json.dumps(t.before),
                "after": json.dumps(t.after),
                **_lineage(t.lineage),
            }
        )
    if session is None:
        return _numbered(rows)
    first = session.first_lineage
    rows.append(
        {
            "output": "session",
            "session_id": session.session_id,
            "sensor_id": session.sensor_id,
            "session_status": str(session.status),
            "first_seq": session.first_seq,
            "last_seq": session.last_seq,
            "records": session.records,
            "snapshots": session.snapshots,
            "updates": session.updates,
            "rejected": session.rejected,
            "gaps": session.gaps,
            "table_rows": session.table_rows,
            "first_event_time": session.first_event_time,
            "last_event_time": session.last_event_time,
            "first_topic": first.topic if first else None,
            "first_partition": first.partition if first else None,
            "first_offset": first.offset if first else None,
            **(_lineage(session.last_lineage) if session.last_lineage else {}),
        }
    )
    return _numbered(rows)


def _numbered(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for ordinal, row in enumerate(rows):
        row["ordinal"] = ordinal
    return rows


def _lineage(lineage: Lineage) -> dict[str, Any]:
    return {"topic": lineage.topic, "partition": lineage.partition, "offset": lineage.offset}


def to_frame(out: Output, session: SessionState | None = None) -> pd.DataFrame:
    # Column by column: a frame built from rows infers float64 for an integer column that
    # holds a None, and 2^63 - 1 does not survive the trip through a double.
    rows = to_rows(out, session)
    return pd.DataFrame(
        {name: pd.array([row.get(name) for row in rows], dtype=dtype)
         for name, dtype in OUTPUT_DTYPES.items()}
    )  # fmt: skip


# Gold reads these incrementally. session_rows, merged row by row every batch, would pay
# for a change feed that nothing reads.
CHANGE_FEED_TABLES = ("row_changes", "sessions", "violations")


def create_tables(spark: SparkSession, settings: Settings) -> None:
    for table, module in TABLES.items():
        path = settings.storage.table_uri(LAYER, table)
        tables.create(spark, module.NAME, path, module.COLUMNS, table in CHANGE_FEED_TABLES)


def run(
    spark: SparkSession,
    settings: Settings,
    continuous: bool = False,
    trace: frozenset[str] | None = None,
) -> RunStats:
    """Rebuild sessions from what bronze holds now (or until stopped, with `continuous`)."""
    create_tables(spark, settings)
    # Without this, processing-time timeouts make Spark run empty batches forever and an
    # availableNow run never ends; sessions then expire at the next batch that has data.
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    path = {table: settings.storage.table_uri(LAYER, table) for table in TABLES}
    bronze = (
        spark.readStream.format("delta")
        .option("maxFilesPerTrigger", settings.silver.max_files_per_trigger)
        .load(settings.storage.table_uri("bronze", "sensor_records"))
    )
    keyed = key_records(bronze)
    outputs = reconstruct_sessions(keyed, settings.silver, settings.kafka.topic_prefix, trace)

    gate_for = quality.stream_gates(spark, settings.quality, settings.storage.root, LAYER)

    def write(batch: DataFrame, txn: Txn) -> None:
        # Every table and every expectation reads the same outputs: computed once.
        batch.persist()
        try:
            gate = gate_for(txn)
            changes = gate.admit(
                row_changes.select_row_changes(batch, txn.version), row_changes.NAME
            )
            touched = gate.admit(sessions.select_sessions(batch, txn.version), sessions.NAME)
            rejected = gate.admit(violations.select_violations(batch, txn.version), violations.NAME)
            gate.commit()
            append(changes, path["row_changes"], txn)
            append(rejected, path["violations"], txn)
            append(
                state_transitions.select_transitions(batch, txn.version),
                path["state_transitions"],
                txn,
            )
            session_rows.write(changes, path["session_rows"], txn)
            sessions.write(touched, path["sessions"], txn)
        finally:
            batch.unpersist()

    checkpoint = settings.storage.checkpoint_uri(LAYER, "sessions_stream")
    interval = settings.silver.trigger_interval if continuous else None
    return run_foreach_batch(outputs, QUERY_NAME, checkpoint, write, interval)


def counts(spark: SparkSession, settings: Settings) -> tuple[dict[str, int], dict[str, int]]:
    """Sessions by status and violations by reason, for the summary a run ends with."""

    def grouped(table: str, column: str) -> dict[str, int]:
        frame = spark.read.format("delta").load(settings.storage.table_uri(LAYER, table))
        return {r[column]: r["count"] for r in sorted(frame.groupBy(column).count().collect())}

    return grouped("sessions", "status"), grouped("violations", "reason")


def live_state(spark: SparkSession, settings: Settings) -> DataFrame:
    """One row per session held in the silver checkpoint's state store, as of its last batch."""
    checkpoint = settings.storage.checkpoint_uri(LAYER, "sessions_stream")
    # RocksDB state is loaded through the state store coordinator, which Spark only starts
    # with the streaming query manager: touch it in a session that runs no stream.
    spark.streams.active  # noqa: B018
    return (
        spark.read.format("statestore")
        .load(checkpoint)
        .select(
            F.col("key.session_id").alias("session_id"),
            F.col("value.groupState.status").alias("status"),
            F.col("value.groupState.last_seq").alias("last_seq"),
            F.col("value.groupState.table_rows").alias("table_rows"),
            F.col("value.groupState.records").alias("records"),
            F.col("value.groupState.version").alias("state_version"),
            F.length("value.groupState.body").alias("state_bytes"),
        )
    )
