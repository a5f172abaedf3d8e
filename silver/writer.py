"""Silver's writer: one micro-batch of the processor's outputs into every silver table,
judged by the layer's quality gate and written under the batch's Delta transaction, each
table by a thread of its own."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.core.settings import Settings
from lakehouse.core.tables import TableSpec
from lakehouse.observe import progress
from lakehouse.quality import gates
from lakehouse.runtime.streams import AfterBatch
from lakehouse.storage import delta
from lakehouse.storage.delta import Txn
from lakehouse.storage.lease import Held
from silver import outputs, row_changes, session_rows, sessions, state_transitions, violations

SILVER_TABLES = (*outputs.OUTPUT_TABLES, session_rows.TABLE)
"""Every table the writer fills."""

_SEARCHING = ThreadPoolExecutor(1, thread_name_prefix="silver-held-rows")
"""The one thread that asks `silver.session_rows` for rows held from before a batch's
snapshots: one per process, not per writer, so that a supervised stream started again
(a writer each time) leaves no idle thread behind."""


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
    resets: list[session_rows.Reset]
    """Per session with a snapshot among the row changes, the lineage of its last one."""


def tally(batch: DataFrame) -> Tally:
    """Count the batch's outputs: one small aggregate, so that a batch pays no job per
    table to learn that it has nothing for it."""
    violation = F.col("output") == violations.NAME
    bytes_unread = violation & F.get_json_object(outputs.OTHER, "$.raw_value").isNull()
    snapshot = (F.col("output") == row_changes.NAME) & (F.col("op") == "snapshot")
    located = bytes_unread | snapshot
    found = (
        batch.groupBy(
            "output",
            F.when(violation, F.get_json_object(outputs.OTHER, "$.reason")).alias("reason"),
            F.when(snapshot, F.col("sensor_id")).alias("sensor_id"),
            F.when(snapshot, F.col("session_id")).alias("session_id"),
            F.when(located, F.col("topic")).alias("topic"),
            F.when(located, F.col("partition")).alias("partition"),
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
    unread = [
        (r.topic, r.partition, r.low, r.high)
        for r in found
        if r.output == violations.NAME and r.topic is not None
    ]
    resets = session_rows.last_resets(
        (r.sensor_id, r.session_id, r.topic, r.partition, r.high)
        for r in found
        if r.sensor_id is not None
    )
    return Tally(rows, by_reason, unread, resets)


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


class SilverWriter:
    """`foreachBatch`'s function: a batch's outputs into silver's tables, under the
    stream's leases (`held`), then `after_batch`."""

    def __init__(
        self, spark: SparkSession, settings: Settings, held: Held, after_batch: AfterBatch
    ) -> None:
        self.spark, self.held, self.after_batch = spark, held, after_batch
        self.uri = {spec.name: settings.storage.table_uri(spec.name) for spec in SILVER_TABLES}
        # Violations of records read in the JVM get their bytes from bronze, by lineage.
        self.bronze = spark.read.format("delta").load(
            settings.storage.table_uri("bronze.sensor_records")
        )
        self.gate_for = gates.stream_gates(spark, settings.quality, settings.storage, "silver")
        self.recorder = progress.listen(spark)

    def __call__(self, batch: DataFrame, txn: Txn) -> None:
        self.held.check()
        # A checkpoint's first batch holds all of bronze (`reconstruct.run`): it replaces
        # silver's tables (a new checkpoint, by --full-refresh or a lost one).
        rebuild = txn.rebuilds
        # Every table and every expectation reads the same outputs: computed once.
        batch = outputs.stamped(batch, txn.version).persist()
        try:
            counted = tally(batch)
            self.recorder.note(txn, violations=counted.by_reason)
            # Most batches that expire nothing and receive nothing (a batch the watermark
            # ran) have nothing to write: not a job more (a replay finds the same nothing).
            # A rebuild replaces every table that holds rows, whether it gets any or not.
            written = {
                s.name
                for s in outputs.OUTPUT_TABLES
                if counted.rows[s.name] or (rebuild and self.holds_rows(s.name))
            }
            if written or rebuild:  # a rebuild replaces the gate's results too
                self.write_tables(batch, txn, counted, written)
        finally:
            batch.unpersist()
        self.after_batch(txn.version, self.held)

    def holds_rows(self, name: str) -> bool:
        """Whether the table `name` (with `silver.session_rows`, the row changes') holds a
        row, from its log: replacing an empty table with nothing would cost a job and a
        commit (about a second each on a new lake's empty tables) to change nothing."""
        held = (name, session_rows.NAME) if name == row_changes.NAME else (name,)
        return any(delta.latest(self.spark, self.uri[n]).files for n in held)

    def write_tables(self, batch: DataFrame, txn: Txn, counted: Tally, written: set[str]) -> None:
        """Judge and write the tables of `written` (with `silver.session_rows` from the row
        changes) under the batch's transaction."""
        # Whether rows held from before a snapshot of the batch are there to end (rarely)
        # asks the table alone: asked beside the gate's counts, not after them.
        held_before: Future[bool] | None = None
        if counted.resets and txn.version > 0:
            held_before = _SEARCHING.submit(
                session_rows.any_held_before,
                batch.sparkSession,
                self.uri[session_rows.NAME],
                counted.resets,
            )
        gate = self.gate_for(txn)
        selected = {
            spec.name: outputs.select(batch, spec)
            for spec in (row_changes.TABLE, sessions.TABLE, violations.TABLE)
            if spec.name in written
        }
        if violations.NAME in selected:
            selected[violations.NAME] = with_raw_values(
                selected[violations.NAME], self.bronze, counted.unread
            )
        admitted = {name: gate.admit(rows, name) for name, rows in selected.items()}
        gate.refuse_failures(batch.sparkSession)
        # The tables are independent: each is written by a thread of its own, so that each
        # one's planning and commits (mostly waiting, on storage and on the driver) overlap
        # the others' work. All write under the batch's one transaction (the MERGEs read
        # theirs from session settings, the same for both), so none can give another a
        # wrong one.
        appended = (row_changes.TABLE, violations.TABLE, state_transitions.TABLE)
        writes: list[Callable[[], None]] = [
            partial(self.merge_rows, batch, txn, counted, admitted, selected, held_before),
            partial(self.merge_sessions, txn, admitted),
            partial(gate.record, txn.rebuilds, batch.sparkSession),
        ]
        writes += [
            partial(self.append, batch, txn, admitted, spec)
            for spec in appended
            if spec.name in written
        ]
        delta.side_by_side(writes)

    def append(
        self, batch: DataFrame, txn: Txn, admitted: dict[str, DataFrame], spec: TableSpec
    ) -> None:
        rows = admitted.get(spec.name)
        if rows is None:
            rows = outputs.select(batch, spec)
        (delta.replace if txn.rebuilds else delta.append)(rows, self.uri[spec.name], txn)

    def merge_rows(
        self,
        batch: DataFrame,
        txn: Txn,
        counted: Tally,
        admitted: dict[str, DataFrame],
        selected: dict[str, DataFrame],
        held_before: Future[bool] | None,
    ) -> None:
        changes = admitted.get(row_changes.NAME)
        if changes is None:
            return
        # The workers marked each row's last change, and the tally found the snapshots; a
        # gate that quarantined some changes leaves the rest to be ranked and found again.
        latest, resets, held = None, None, None
        if changes is selected[row_changes.NAME]:
            marked = batch.where(F.col(outputs.LATEST))
            latest = outputs.select(marked, row_changes.TABLE)
            resets = counted.resets
            held = held_before.result() if held_before is not None else None
        uri = self.uri[session_rows.NAME]
        session_rows.write(changes, uri, txn, latest, txn.rebuilds, resets, held)

    def merge_sessions(self, txn: Txn, admitted: dict[str, DataFrame]) -> None:
        if sessions.NAME in admitted:
            sessions.write(admitted[sessions.NAME], self.uri[sessions.NAME], txn, txn.rebuilds)
