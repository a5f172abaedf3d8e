"""The silver stream: bronze records -> per-session state machine -> the silver tables.

Bronze is read as a Delta stream and parsed in the JVM (`silver.parsing`); each record is
keyed by its session, (sensor, session id); `transformWithState`, keyed by sensor,
hands each sensor's rows of a micro-batch to the JVM's `SensorSessions` (`silver.processor`),
which sorts them by Kafka (partition, offset) and judges each session's by the session
machine; one `foreachBatch` (`silver.writer.SilverWriter`) writes all
silver tables, each write idempotent under the batch's Delta transaction.
"""

from __future__ import annotations

import threading
from functools import partial

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bronze import sensor_records
from lakehouse.core.console import echo, pairs
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings
from lakehouse.observe import progress
from lakehouse.quality import store
from lakehouse.runtime.streams import (
    TO_THE_END,
    RunStats,
    Stream,
    StreamRun,
    checkpoint_format,
    run_foreach_batch,
)
from lakehouse.storage import catalog, delta, lease, positions
from silver import sessions, violations
from silver.parsing import keyed_records
from silver.processor import SESSIONS, reconstruct_sessions
from silver.session_state import STATE_VERSION
from silver.writer import SILVER_TABLES, SilverWriter

QUERY_NAME = CHECKPOINT = "silver.sessions_stream"
PROGRESS = progress.progress_table("silver").name
WRITES = (
    *(spec.name for spec in SILVER_TABLES),
    store.quarantine_table("silver").name,
    store.results_table("silver").name,
    PROGRESS,
)
"""Every table the silver stream writes: on S3 it holds their leases while it runs."""


def run(spark: SparkSession, settings: Settings, how: StreamRun = TO_THE_END) -> RunStats:
    """Rebuild sessions from what bronze holds now (or until stopped, when continuous); a
    full refresh starts a new checkpoint, whose first batch replaces silver's tables."""
    checkpoint = settings.storage.checkpoint_uri(CHECKPOINT)
    if not _bronze_made(spark, settings, how.continuous, how.stop):
        return RunStats(stopped=True)
    with lease.holding(settings, WRITES, "the silver stream") as held:
        _prepare(spark, settings, checkpoint, how.full_refresh)
        interval = settings.silver.trigger_interval if how.continuous else None
        # A new stream's first batches list bronze's files by modification time, not by
        # commit: out of Kafka order wherever commits share an instant (S3 keeps seconds)
        # or compaction rewrote old records into new files. Sessions are sorted within a
        # batch only, so a new checkpoint takes all of bronze in its first batch.
        limited = partial(
            read_sessions, spark, settings, how.trace, settings.silver.max_files_per_trigger
        )
        whole = partial(read_sessions, spark, settings, how.trace, 2**31 - 1)
        recorded = ("silver", settings.storage.table_uri(PROGRESS))
        write = SilverWriter(spark, settings, held, how.after_batch)
        # Each batch writes every table but its progress under the batch's transaction.
        written = [settings.storage.table_uri(n) for n in WRITES if n != PROGRESS]
        return run_foreach_batch(
            spark, limited, QUERY_NAME, checkpoint, write, interval, whole,
            progress_to=recorded, stop=how.stop, written=written,
            setup=partial(_make_tables, spark, settings),
        )  # fmt: skip


def _bronze_made(
    spark: SparkSession, settings: Settings, continuous: bool, stop: threading.Event | None
) -> bool:
    """Whether bronze's table is there to read: `run all` starts both streams at once, and
    on a new lake bronze makes its table as it starts, so a continuous run waits for it
    (False: stopped while waiting); a run to the end of bronze cannot, and says so."""
    uri = settings.storage.table_uri(sensor_records.NAME)
    if catalog.is_delta(spark, uri):
        return True
    if not continuous:
        raise LakehouseError(
            f"silver reads {sensor_records.NAME}, which does not exist yet ({uri}): "
            "ingest first, with `lakehouse run bronze`"
        )
    echo(f"silver: waiting for {sensor_records.NAME}, which the bronze stream makes as it starts")
    stop = stop or threading.Event()
    while not catalog.is_delta(spark, uri):
        if stop.wait(1):
            return False
    return True


def _prepare(spark: SparkSession, settings: Settings, checkpoint: str, full_refresh: bool) -> None:
    """Silver's checkpoint deleted where this run rebuilds silver: asked to, or because
    bronze was rebuilt since silver last read it."""
    bronze_uri = settings.storage.table_uri(sensor_records.NAME)
    if not full_refresh:
        refuse_old_state(spark, checkpoint)
        found = positions.read_note(spark, f"{checkpoint}/{LAYOUT_NOTE}")
        if refused := layout_refusal(found, STATE_VERSION, checkpoint):
            raise LakehouseError(refused)
        read = positions.stream_source_id(spark, checkpoint)
        if read is not None and read != delta.table_id(spark, bronze_uri):
            echo("silver: bronze was rebuilt since silver last read it: rebuilding silver")
            full_refresh = True
    if full_refresh:
        fs, path = catalog.hadoop_fs(spark, checkpoint)
        fs.delete(path, True)
    positions.write_note(spark, f"{checkpoint}/{LAYOUT_NOTE}", str(STATE_VERSION))
    # A batch without data runs when the watermark moved, so that silent sessions expire
    # without waiting for more data; it moves only with data, so a run ends.
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")


def _make_tables(spark: SparkSession, settings: Settings) -> None:
    """Silver's tables and its progress table, made where new (or given the properties
    their specs gained)."""
    delta.create_all(spark, {settings.storage.table_uri(spec.name): spec for spec in SILVER_TABLES})
    progress.create(spark, settings.storage, "silver")


def read_sessions(
    spark: SparkSession, settings: Settings, trace: frozenset[str] | None, max_files: int
) -> DataFrame:
    """The processor's outputs over bronze read as a stream, `max_files` a batch."""
    bronze = (
        spark.readStream.format("delta")
        .option("maxFilesPerTrigger", max_files)
        .load(settings.storage.table_uri(sensor_records.NAME))
    )
    keyed = keyed_records(bronze, settings.kafka.topic_prefix)
    return reconstruct_sessions(keyed, settings.silver, settings.kafka.topic_prefix, trace)


LAYOUT_NOTE = "lakehouse_state_version"
"""The file in silver's checkpoint that says which `STATE_VERSION` its state is in."""


def layout_refusal(found: str | None, code: int, checkpoint: str) -> str | None:
    """Why a checkpoint whose state is of layout `found` cannot be resumed by code of
    layout `code`: a live checkpoint's state never changes layout. None: it can (a
    checkpoint from before the note has the layout `refuse_old_state` let through)."""
    if found is None or int(found) == code:
        return None
    return (
        f"the silver checkpoint {checkpoint} holds state of layout version {found}, and this "
        f"code keeps version {code}: a running checkpoint's state cannot change layout. Build "
        "silver at the new layout beside the live one with `lakehouse shadow start silver`, "
        "then `shadow run`, `shadow compare` and `shadow swap` (docs/operations.md)"
    )


JVM_OPERATOR = "transformWithStateExec"
"""The state-metadata name of the operator that holds state version 5 (the JVM's)."""


def refuse_old_state(spark: SparkSession, checkpoint: str) -> None:
    """One line, before Spark says it in a trace, for a checkpoint older than this code's
    state: sessions held one per key and timed by the pipeline's clock (version 3), or held
    by the Python processor (version 4)."""
    found = checkpoint_format(spark, checkpoint)
    if found is None:
        return
    names = []  # transformWithState keeps commit logs of format 2 only
    if found != "1":
        metadata = spark.read.format("state-metadata").load(checkpoint).collect()
        names = [r.operatorName for r in metadata]
    if JVM_OPERATOR not in names:
        raise LakehouseError(
            f"the silver checkpoint {checkpoint} holds state older than version "
            f"{STATE_VERSION} (sessions held by the session machine in the JVM), "
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
        f"  sessions by status:   {pairs(by_status)}",
        f"  violations by reason: {pairs(by_reason) or 'none'}",
    ]


STREAM = Stream("silver", sensor_records.NAME, CHECKPOINT, WRITES, run, summary)
"""Silver as a node of the pipeline: bronze's records into every silver table."""


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
            # a key of the JVM's operator is a string: Spark names its column `value`
            F.col("key.value").alias("sensor_id"),
            F.col("user_map_key.value").alias("session_id"),
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
