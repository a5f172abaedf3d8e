"""Running a streaming query as a job: progress lines, a clean stop, one-line failures."""

from __future__ import annotations

import importlib
import pkgutil
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType, ModuleType
from typing import Any

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from lakehouse.core.console import Live, echo
from lakehouse.core.errors import Explained, LakehouseError, Unavailable, explain, transient
from lakehouse.core.settings import Settings
from lakehouse.observe import progress
from lakehouse.runtime.spark import STATE_FORMAT, TRACE_FILE
from lakehouse.storage import catalog, delta
from lakehouse.storage.delta import Txn
from lakehouse.storage.lease import Held

AfterBatch = Callable[[int, Held], None]
"""What a stream runs once a batch's writes are done: `(batch_id, the leases it holds)`."""


def nothing_after_batch(_batch_id: int, _held: Held) -> None:
    """The default of a stream run on its own, e.g. by a test: nothing."""


@dataclass(frozen=True)
class StreamRun:
    """How a stream is run: one shape for every stream."""

    continuous: bool = False
    """Keep running on its trigger until stopped (default: to the current end of its input)."""
    full_refresh: bool = False
    """Start a new checkpoint, whose first batch replaces the stream's tables."""
    trace: frozenset[str] | None = None
    """Sessions whose every state transition silver records (all, when empty); None: none.
    Bronze keeps no sessions and has none to trace."""
    after_batch: AfterBatch = nothing_after_batch
    """Run in each batch once its writes are done, under the stream's leases."""
    stop: threading.Event | None = None
    """Set, the query stops after its running batch (default: on SIGINT or SIGTERM)."""


TO_THE_END = StreamRun()
"""A stream run once, to the current end of its input."""


@dataclass(frozen=True)
class Stream:
    """A streaming job, declared by its module as `STREAM`, as `@model` declares a model:
    what it reads, where its checkpoint is, what it writes, how to run and sum it up.
    `lakehouse.definitions` makes it a node of the pipeline's graph."""

    layer: str
    reads: str
    """The Delta table it reads incrementally, or `kafka`."""
    checkpoint: str
    writes: tuple[str, ...]
    """Every table it writes: while it runs, it holds their leases on S3 and compacts them."""
    run: Callable[[SparkSession, Settings, StreamRun], RunStats]
    summary: Callable[[SparkSession, Settings, RunStats], list[str]]
    """The lines a run ends with."""


def declared_streams(*packages: ModuleType) -> list[Stream]:
    """Every stream the modules of `packages` declare (as `STREAM`), found by importing
    them all, as models are found."""
    found = []
    for package in packages:
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            if isinstance(stream := getattr(module, "STREAM", None), Stream):
                found.append(stream)
    return found


def run_foreach_batch(
    spark: SparkSession,
    frame: Callable[[], DataFrame],
    name: str,
    checkpoint: str,
    write: Callable[[DataFrame, Txn], None],
    trigger_interval: str | None,
    unlimited: Callable[[], DataFrame] | None = None,
    progress_to: tuple[str, str] | None = None,
    stop: threading.Event | None = None,
    written: Sequence[str] = (),
    setup: Callable[[], None] | None = None,
) -> RunStats:
    """Run the streaming frame `frame` makes into `write` per micro-batch: to the current
    end of the input (`availableNow`) when `trigger_interval` is None, else every interval
    until stopped. `unlimited` makes the same query without the source's read limits,
    which a new checkpoint runs first, to the end of its input: its first batch takes all
    there is. Each is made only when it runs (planning costs the driver up to a second).
    `progress_to`: (node, progress table URI) that records each batch's progress. `stop`:
    set, the query stops after its running batch (default: on SIGINT or SIGTERM).
    `written`: the tables `write` writes under the batch's `Txn`, prepared for the first
    batch's writes while the query starts (`delta.prepare_writes`: the driver mostly
    waits then, on the source's offsets and the planning), and for the next batch's as
    `_BatchWrites` says. `setup`: what the first batch's writes need and the query's
    planning does not (the tables `write` writes), done once, while the query starts: the
    first batch waits for it; a failure stops the query and is raised."""
    next_writes = () if trigger_interval is None else written
    batches = _BatchWrites(spark, write, checkpoint, next_writes, setup)
    stats = RunStats()

    def run(source: Callable[[], DataFrame] = frame, **trigger: Any) -> RunStats:
        writer = (
            source()
            .writeStream.queryName(name)
            .foreachBatch(batches)
            .option("checkpointLocation", checkpoint)
            .trigger(**trigger)
        )
        query = _start_in_its_format(spark, writer, name, checkpoint)
        batches.begin(query, written)
        recording = None
        if progress_to is not None:
            recording = progress.StreamRecording(spark, *progress_to, batches.query_id)
        batches.started.set()
        trace = spark.conf.get(TRACE_FILE, None)
        return await_query(query, name, checkpoint, trace, stats, recording, stop)

    # A batch that a killed job left uncommitted is redone as planned, whole. Not
    # Trigger.Once, which ignores read limits too but runs one batch only: the batch
    # without data that ends what the first batch's watermark made due would wait for the
    # next data (a query restarted has no last batch to ask whether another is needed).
    if unlimited is not None and checkpoint_format(spark, checkpoint) is None:
        run(unlimited, availableNow=True)
        if stats.stopped or trigger_interval is None:
            return stats
    if trigger_interval is None:
        return run(availableNow=True)
    return run(processingTime=trigger_interval)


class _BatchWrites:
    """`foreachBatch`'s function: `write` under the batch's `Txn`, a failure explained.
    Once a batch is written, the tables of `prepare_next` are prepared for the next
    batch's writes, where a trigger interval leaves a pause to do it in: to the end of the
    input, batches follow each other at once and the last one's would be work for nothing."""

    def __init__(
        self,
        spark: SparkSession,
        write: Callable[[DataFrame, Txn], None],
        checkpoint: str,
        prepare_next: Sequence[str],
        setup: Callable[[], None] | None,
    ) -> None:
        self.spark, self.write, self.checkpoint = spark, write, checkpoint
        self.prepare_next, self.setup = prepare_next, setup
        self.query_id = ""
        self.started = threading.Event()
        """Set once the query has started: its id is known only once start() returned."""

    def begin(self, query: StreamingQuery, written: Sequence[str]) -> None:
        """The query has started: its id is known, the setup done (once) and the first
        batch's writes prepared, while the query plans its first batch on its own thread
        (Delta's offsets, the plan: seconds). A setup that fails stops the query."""
        self.query_id = str(query.id)  # the checkpoint's: the same on every start
        if self.setup is not None:
            try:
                self.setup()
            except BaseException:
                query.stop()
                raise
            self.setup = None  # once: a new checkpoint's second query finds it done
        if written:
            delta.prepare_writes(self.spark, written)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        self.started.wait()
        try:
            self.write(batch, Txn(self.query_id, batch_id))
            if self.prepare_next:
                delta.prepare_writes(self.spark, self.prepare_next)
        except LakehouseError:
            raise
        except Exception as error:
            # Explained here, where the JVM's exception is at hand: Spark passes a batch's
            # failure on as the text of its Python traceback.
            kind = Unavailable if transient(error) else Explained
            raise kind(explain(error, self.checkpoint)) from error


def _start_in_its_format(
    spark: SparkSession, writer: DataStreamWriter, name: str, checkpoint: str
) -> StreamingQuery:
    """Start the query in the checkpoint format its checkpoint was begun in: Spark refuses
    to read a commit log of another format, and the setting is not kept in the checkpoint."""
    default = spark.conf.get(STATE_FORMAT) or "1"  # Spark's own default
    kept = checkpoint_format(spark, checkpoint) or default
    fs, state = catalog.hadoop_fs(spark, f"{checkpoint}/state")
    if kept == "1" and fs.exists(state):
        echo(
            f"{name}: warning: its checkpoint keeps state checkpoint format 1, in which a job "
            "killed while uploading state can restore wrong state; rebuild it on a new "
            "checkpoint to move to format 2"
        )
    spark.conf.set(STATE_FORMAT, kept)
    try:
        return writer.start()  # the query takes its own copy of the session's settings
    finally:
        spark.conf.set(STATE_FORMAT, default)


def checkpoint_started(spark: SparkSession, checkpoint: str) -> bool:
    """Whether a query planned a batch on this checkpoint (one it will redo as planned)."""
    fs, offsets = catalog.hadoop_fs(spark, f"{checkpoint}/offsets")
    return fs.exists(offsets) and any(
        s.getPath().getName().isdigit() for s in fs.listStatus(offsets)
    )


def checkpoint_format(spark: SparkSession, checkpoint: str) -> str | None:
    """The format of a checkpoint's commit log (`v1`/`v2` heads each file), None if new."""
    fs, commits = catalog.hadoop_fs(spark, f"{checkpoint}/commits")
    if not fs.exists(commits):
        return None
    batches = [s.getPath() for s in fs.listStatus(commits) if s.getPath().getName().isdigit()]
    if not batches:
        return None
    latest = max(batches, key=lambda path: int(path.getName()))
    stream = fs.open(latest)
    try:
        head = bytes(stream.readNBytes(3)).decode()
    finally:
        stream.close()
    return head.removeprefix("v").strip() or None


def _flush(recording: progress.StreamRecording, label: str) -> None:
    """Keep the progress of the batches run so far; a failure to (storage that blips) is a
    line, and the rows wait for the next flush: the stream goes on."""
    try:
        recording.flush()
    except Exception as error:
        echo(f"{label}: progress not recorded yet, retried in a while: {explain(error)}")


def _close(recording: progress.StreamRecording, query: StreamingQuery) -> None:
    """Keep the progress of the batches that ran; a failure to is a line, never what the
    job reports (it may be ending on another failure)."""
    try:
        ran = [p["batchId"] for p in query.recentProgress if "addBatch" in p["durationMs"]]
        recording.close(max(ran, default=-1))
    except Exception as error:
        echo(f"{query.name}: progress of its last batches not recorded: {explain(error)}")


@dataclass
class RunStats:
    batches: int = 0
    input_rows: int = 0
    seconds: float = 0.0
    stopped: bool = False
    """A stop was asked for (SIGINT/SIGTERM) while the query ran."""


def _count_batches(
    query: StreamingQuery,
    label: str,
    seen_batch: int,
    stats: RunStats,
    recording: progress.StreamRecording | None,
) -> int:
    """Add each batch that ended after `seen_batch` to `stats`, with a line; the last one
    seen back."""
    for done in query.recentProgress:
        if done["batchId"] > seen_batch and done["numInputRows"] > 0:
            seen_batch = done["batchId"]
            # Spark counts the source's rows once per plan that read them; the recorded
            # row has the job's own count where it has one.
            counted = done["numInputRows"]
            rows = counted
            if recording is not None:
                rows = recording.input_rows(seen_batch, counted)
            rate = done.get("processedRowsPerSecond", 0) * rows / counted
            stats.batches += 1
            stats.input_rows += rows
            echo(
                f"{label}: batch {seen_batch} wrote {rows:,} rows ({rate:,.0f}/s), "
                f"{stats.input_rows:,} this run"
            )
    return seen_batch


@contextmanager
def stopping_on_signals(label: str) -> Iterator[threading.Event]:
    """An event SIGINT and SIGTERM set while the block runs (in the main thread), instead
    of ending the process: what a job waits on to stop cleanly."""
    stop = threading.Event()

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        if not stop.is_set():
            echo(f"{label}: {signal.Signals(signum).name} received, stopping after this batch")
        stop.set()

    previous = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def await_query(
    query: StreamingQuery,
    label: str,
    checkpoint: str,
    trace_file: str | None = None,
    stats: RunStats | None = None,
    recording: progress.StreamRecording | None = None,
    stop: threading.Event | None = None,
) -> RunStats:
    """Wait for the query to end, printing each batch; `stop` set (by default, SIGINT or
    SIGTERM) stops it cleanly. `stats` of an earlier query of the same run are added to;
    `recording` keeps each batch's progress as it goes, and what is left once the query
    ended. A clean stop waits for the running batch to commit, so a restart redoes at most
    a batch that had just begun (within the second this loop polls)."""
    if stop is None:
        with stopping_on_signals(label) as stop:
            return await_query(query, label, checkpoint, trace_file, stats, recording, stop)
    stats = RunStats() if stats is None else stats
    seen_batch, started = -1, time.monotonic()
    finished_before_stop: int | None = None

    # A live line on a terminal while batches run (and while one is awaited).
    with Live(label) as live:
        try:
            while query.isActive:
                if stop.is_set():
                    # Stop between batches; a stream that is always busy (batches longer than
                    # its trigger) is stopped once the batch running at the request commits:
                    # the next one has just begun and is redone, exactly, on restart.
                    finished = max(
                        (p["batchId"] for p in query.recentProgress if p["numInputRows"] > 0),
                        default=-1,
                    )
                    if finished_before_stop is None:
                        finished_before_stop = finished
                    if not query.status["isTriggerActive"] or finished > finished_before_stop:
                        query.stop()
                        break
                query.awaitTermination(1)
                seen_batch = _count_batches(query, label, seen_batch, stats, recording)
                live.show(f"{query.status['message'].lower()}; {stats.input_rows:,} rows this run")
                if recording is not None:
                    _flush(recording, label)
            query.awaitTermination()
            # The last batches may end while the loop above records the ones before them.
            _count_batches(query, label, seen_batch, stats, recording)
        except StreamingQueryException as error:
            where = f" (whole trace in {trace_file})" if trace_file else ""
            kind = Unavailable if transient(error) else LakehouseError
            raise kind(f"{label} failed: {explain(error, checkpoint)}{where}") from None
        finally:
            if recording is not None:
                _close(recording, query)
    stats.seconds += time.monotonic() - started
    stats.stopped = stop.is_set()
    return stats
