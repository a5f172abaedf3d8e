"""The silver stream: bronze records -> per-session state machine -> the silver tables.

Bronze is read as a Delta stream and parsed in the JVM (`silver.parsing`); each record is
keyed by its session; `applyInPandasWithState` hands each session's rows of a micro-batch
to `silver.session_batch` after sorting them by Kafka (partition, offset); one
`foreachBatch` writes all silver tables, each write idempotent under the batch's Delta
transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
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
    Mode,
    Output,
    Policy,
    SessionMachine,
    SessionState,
    Status,
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


def reconstruct_sessions(
    parsed: DataFrame, silver: SilverSettings, topic_prefix: str, trace: frozenset[str] | None
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

    def sensor_of(topic: str) -> str | None:
        return topic[len(topic_prefix) :] if topic.startswith(topic_prefix) else None

    def on_session(
        key: tuple[Any, ...], chunks: Iterable[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        session_id = str(key[0])
        if state.hasTimedOut:
            session = load_state(state.get)
            state.remove()
            if session.status is not Status.CLOSED:
                machine_for(_topic(session), session_id).expire(session)
                yield session_batch.to_frame(Output(), session)
            return
        # Spark hands a group's rows over in no order and in several chunks; Kafka
        # (partition, offset) is the order the sensor sent them in.
        rows = pd.concat(list(chunks), ignore_index=True).sort_values(
            ["partition", "offset", "pos"], ignore_index=True
        )
        topic = rows["topic"].iat[0]
        if session_id == UNKEYED:
            yield session_batch.unkeyed(rows, sensor_of(topic))
            return
        session = load_state(state.get) if state.exists else SessionState(session_id)
        topic = _topic(session) or topic
        frames, keep = session_batch.judge(
            machine_for(topic, session_id), session, rows, sensor_of(topic)
        )
        if keep:
            # A closed session stays until the timeout, so that a record after its end is
            # rejected as such in any later batch rather than opening a new session.
            state.update(save_state(session))
            state.setTimeoutDuration(timeout_ms)
        yield from frames

    return parsed.groupBy("session_id").applyInPandasWithState(
        on_session,
        outputs.SCHEMA,
        STATE_SCHEMA,
        "append",
        GroupStateTimeout.ProcessingTimeTimeout,
    )


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


def with_raw_values(rejected: DataFrame, bronze: DataFrame) -> DataFrame:
    """Violations with the bytes of their record: records read in the JVM reach Python as
    typed columns only, so their bytes are looked up in bronze by lineage, where needed."""
    missing = rejected.where(F.col("raw_value").isNull())
    ranges = (
        missing.groupBy("topic", "partition")
        .agg(F.min("offset").alias("low"), F.max("offset").alias("high"))
        .collect()
    )
    if not ranges:
        return rejected
    # Offset ranges per partition let Delta skip the files that cannot hold them.
    near = F.lit(False)
    for r in ranges:
        near = near | (
            (F.col("topic") == r.topic)
            & (F.col("partition") == r.partition)
            & F.col("offset").between(r.low, r.high)
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
        bronze_uri = settings.storage.table_uri(sensor_records.NAME)
        bronze = (
            spark.readStream.format("delta")
            .option("maxFilesPerTrigger", settings.silver.max_files_per_trigger)
            .load(bronze_uri)
        )
        parsed = parse_records(bronze, settings.kafka.topic_prefix)
        rows = reconstruct_sessions(parsed, settings.silver, settings.kafka.topic_prefix, trace)
        bronze_now = spark.read.format("delta").load(
            settings.storage.table_uri(sensor_records.NAME)
        )
        gate_for = gates.stream_gates(spark, settings.quality, settings.storage, "silver")

        def write(batch: DataFrame, txn: Txn) -> None:
            held.check()
            # Every table and every expectation reads the same outputs: computed once.
            batch.persist()
            try:
                gate = gate_for(txn)
                selected = {
                    spec.name: outputs.select(batch, spec, txn.version)
                    for spec in (row_changes.TABLE, sessions.TABLE, violations.TABLE)
                }
                selected[violations.NAME] = with_raw_values(selected[violations.NAME], bronze_now)
                admitted = {name: gate.admit(rows, name) for name, rows in selected.items()}
                gate.commit()
                changes = admitted[row_changes.NAME]

                def appends() -> None:
                    delta.append(changes, uri[row_changes.NAME], txn)
                    transitions = outputs.select(batch, state_transitions.TABLE, txn.version)
                    # Most batches reject nothing and trace nothing: a commit of no rows
                    # costs as much as a small one (a replay finds them empty again).
                    for rows, spec in ((admitted[violations.NAME], violations.TABLE),
                                       (transitions, state_transitions.TABLE)):  # fmt: skip
                        if not rows.isEmpty():
                            delta.append(rows, uri[spec.name], txn)

                def merges() -> None:
                    # The workers marked each row's last change; a gate that quarantined
                    # some changes leaves the rest to be ranked again.
                    latest = None
                    if changes is selected[row_changes.NAME]:
                        marked = batch.where(F.col(outputs.LATEST))
                        latest = outputs.select(marked, row_changes.TABLE, txn.version)
                    session_rows.write(changes, uri[session_rows.NAME], txn, latest)
                    sessions.write(admitted[sessions.NAME], uri[sessions.NAME], txn)

                # The tables are independent: while one thread appends, the other merges,
                # so that each one's planning and commits overlap the other's work. Both
                # write under the batch's one transaction (the MERGEs read theirs from
                # session settings), so neither can give the other a wrong one.
                with ThreadPoolExecutor(max_workers=2) as pool:
                    for written in [pool.submit(appends), pool.submit(merges)]:
                        written.result()
            finally:
                batch.unpersist()
            after_batch(txn.version, held)

        checkpoint = settings.storage.checkpoint_uri(CHECKPOINT)
        interval = settings.silver.trigger_interval if continuous else None
        # A new stream's first batches list bronze's files by modification time, not by
        # commit: out of Kafka order wherever commits share an instant (S3 keeps seconds)
        # or compaction rewrote old records into new files. Sessions are sorted within a
        # batch only, so a new checkpoint takes all of bronze in its first batch.
        return run_foreach_batch(
            rows, QUERY_NAME, checkpoint, write, interval, whole_first_batch=True
        )


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
