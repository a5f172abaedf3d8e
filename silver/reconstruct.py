"""The silver stream: bronze records -> per-session state machine -> the silver tables.

Bronze is read as a Delta stream; each record is keyed by the `session_id` in its value;
`applyInPandasWithState` hands each session's records of a micro-batch to
`SessionMachine` after sorting them by Kafka (partition, offset); one `foreachBatch`
writes all silver tables, each write idempotent under the batch's Delta transaction.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from bronze import sensor_records
from lakehouse import delta, lease
from lakehouse.delta import Txn
from lakehouse.quality import gates
from lakehouse.settings import Settings, SilverSettings
from lakehouse.streaming import AfterBatch, RunStats, nothing_after_batch, run_foreach_batch
from silver import (
    outputs,
    protocol,
    row_changes,
    session_rows,
    sessions,
    state_transitions,
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

QUERY_NAME = CHECKPOINT = "silver.sessions_stream"
TABLES = (*outputs.TABLES, session_rows.TABLE)
WRITES = (
    *(spec.name for spec in TABLES),
    gates.quarantine("silver").name,
    gates.results("silver").name,
)
"""Every table the silver stream writes: on S3 it holds their leases while it runs."""
STATE_SCHEMA = (
    "version INT, status STRING, last_seq BIGINT, table_rows BIGINT, records BIGINT, body STRING"
)
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
                batch["topic"],
                batch["partition"],
                batch["offset"],
                batch["key"],
                batch["value"],
                strict=True,
            )
        ]

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
        frame, keep = judge(machine_for(topic, session_id), session, records)
        if keep:
            # A closed session stays until the timeout, so that a record after its end is
            # rejected as such in any later batch rather than opening a new session.
            state.update(save_state(session))
            state.setTimeoutDuration(timeout_ms)
        yield frame

    return keyed.groupBy("session_id").applyInPandasWithState(
        on_session,
        outputs.SCHEMA,
        STATE_SCHEMA,
        "append",
        GroupStateTimeout.ProcessingTimeTimeout,
    )


def judge(
    machine: SessionMachine, session: SessionState, records: list[Record]
) -> tuple[pd.DataFrame, bool]:
    """The session's output for a batch of its records, and whether its new state is kept.

    Nothing raises but the `fail` policy: an error outside the state machine's own guard
    per record (typing the output, say) makes the batch's records `internal` violations
    and the state stays as it was, so the session goes on as if they had never come: its
    next record shows the gap.
    """
    try:
        return to_frame(machine.process(session, records), session), True
    except IntegrityError:
        raise
    except Exception as error:
        frame = to_frame(Output(violations=internal_violations(records, error)))
        if machine.policy is Policy.FAIL:
            detail = frame.loc[0, "detail"]
            raise IntegrityError(f"session {session.session_id}: {detail}") from None
        return frame, False


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


def to_frame(out: Output, session: SessionState | None = None) -> pd.DataFrame:
    """The machine's output as rows of the silver tables, the session's summary last.

    Each table's rows are numbered (`ordinal`) in the order their Kafka record produced
    them: a number that does not depend on how records were cut into micro-batches."""
    rows = [
        *({"output": row_changes.NAME, **row_changes.row(c)} for c in out.changes),
        *({"output": violations.NAME, **violations.row(v)} for v in out.violations),
        *({"output": state_transitions.NAME, **state_transitions.row(t)} for t in out.transitions),
        *([{"output": sessions.NAME, **sessions.row(session)}] if session else []),
    ]
    produced: Counter[tuple[Any, ...]] = Counter()
    for row in rows:
        record = (row["output"], row.get("topic"), row.get("partition"), row.get("offset"))
        row["ordinal"] = produced[record]
        produced[record] += 1
    return outputs.to_frame(rows)


def run(
    spark: SparkSession,
    settings: Settings,
    continuous: bool = False,
    trace: frozenset[str] | None = None,
    after_batch: AfterBatch = nothing_after_batch,
) -> RunStats:
    """Rebuild sessions from what bronze holds now (or until stopped, with `continuous`);
    `after_batch` runs in each batch once its writes are done, under the stream's leases."""
    with lease.holding(settings, WRITES, "the silver stream") as held:
        uri = {spec.name: settings.storage.table_uri(spec.name) for spec in TABLES}
        for spec in TABLES:
            delta.create(spark, spec, uri[spec.name])
        # Without this, processing-time timeouts make Spark run empty batches forever and
        # an availableNow run never ends; sessions then expire at the next batch with data.
        spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        bronze = (
            spark.readStream.format("delta")
            .option("maxFilesPerTrigger", settings.silver.max_files_per_trigger)
            .load(settings.storage.table_uri(sensor_records.NAME))
        )
        keyed = key_records(bronze)
        rows = reconstruct_sessions(keyed, settings.silver, settings.kafka.topic_prefix, trace)
        gate_for = gates.stream_gates(spark, settings.quality, settings.storage, "silver")

        def write(batch: DataFrame, txn: Txn) -> None:
            held.check()
            # Every table and every expectation reads the same outputs: computed once.
            batch.persist()
            try:
                gate = gate_for(txn)
                admitted = {
                    spec.name: gate.admit(outputs.select(batch, spec, txn.version), spec.name)
                    for spec in (row_changes.TABLE, sessions.TABLE, violations.TABLE)
                }
                gate.commit()
                changes = admitted[row_changes.NAME]
                delta.append(changes, uri[row_changes.NAME], txn)
                delta.append(admitted[violations.NAME], uri[violations.NAME], txn)
                transitions = outputs.select(batch, state_transitions.TABLE, txn.version)
                delta.append(transitions, uri[state_transitions.NAME], txn)
                session_rows.write(changes, uri[session_rows.NAME], txn)
                sessions.write(admitted[sessions.NAME], uri[sessions.NAME], txn)
            finally:
                batch.unpersist()
            after_batch(txn.version, held)

        checkpoint = settings.storage.checkpoint_uri(CHECKPOINT)
        interval = settings.silver.trigger_interval if continuous else None
        return run_foreach_batch(rows, QUERY_NAME, checkpoint, write, interval)


def counts(spark: SparkSession, settings: Settings) -> tuple[dict[str, int], dict[str, int]]:
    """Sessions by status and violations by reason."""

    def grouped(table: str, column: str) -> dict[str, int]:
        frame = spark.read.format("delta").load(settings.storage.table_uri(table))
        return {r[column]: r["count"] for r in sorted(frame.groupBy(column).count().collect())}

    return grouped(sessions.NAME, "status"), grouped(violations.NAME, "reason")


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
