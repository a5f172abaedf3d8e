"""Running a streaming query as a job: progress lines, a clean stop, one-line failures."""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import TypeVar

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

from lakehouse.errors import LakehouseError

T = TypeVar("T")


@dataclass(frozen=True)
class Txn:
    """Delta's idempotent-write key for one micro-batch: (query id, batch id).

    foreachBatch alone is at-least-once: a batch that wrote but did not commit its offsets
    runs again after a crash. Writing under this transaction makes Delta skip the replay,
    which is what makes a foreachBatch sink exactly-once. The query id is stable for a
    checkpoint and new for a new one, so a fresh checkpoint never collides with old writes.
    """

    app_id: str
    version: int


def append(frame: DataFrame, path: str, txn: Txn) -> None:
    """Append to a Delta table unless this micro-batch's transaction is already there."""
    (
        frame.write.format("delta")
        .mode("append")
        .option("txnAppId", txn.app_id)
        .option("txnVersion", txn.version)
        .save(path)
    )


def retry_on_conflict(write: Callable[[], T], what: str, attempts: int = 5) -> T:
    """Run a Delta write again when a concurrent commit made it conflict.

    Compaction rewrites files that a MERGE may have read in the meantime; Delta then
    refuses the MERGE's commit, having written nothing, so running it again on the new
    snapshot is safe (and under the batch's transaction, still exactly once).
    """
    for attempt in range(1, attempts + 1):
        try:
            return write()
        except Exception as error:
            if attempt == attempts or not is_conflict(error):
                raise
            print(f"{what}: a concurrent commit conflicted ({_first_line(str(error))[:120]}); "
                  f"retrying ({attempt}/{attempts - 1})", flush=True)  # fmt: skip
            time.sleep(0.5 * attempt)
    raise AssertionError("unreachable")


def is_conflict(error: Exception) -> bool:
    """Whether Delta refused a commit because another one changed what it had read."""
    text = str(error)
    return any(
        marker in text
        for marker in ("DELTA_CONCURRENT_", "ConcurrentDeleteRead", "ConcurrentAppend",
                       "ConcurrentDeleteDelete", "DELTA_METADATA_CHANGED")
    )  # fmt: skip


def run_foreach_batch(
    frame: DataFrame,
    name: str,
    checkpoint: str,
    write: Callable[[DataFrame, Txn], None],
    trigger_interval: str | None,
) -> RunStats:
    """Run `frame` into `write` per micro-batch: to the current end of the input
    (`availableNow`) when `trigger_interval` is None, else every interval until stopped."""
    query_id: list[str] = []
    started = threading.Event()

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        started.wait()  # the query id is known only once start() has returned
        write(batch, Txn(query_id[0], batch_id))

    writer = (
        frame.writeStream.queryName(name)
        .foreachBatch(write_batch)
        .option("checkpointLocation", checkpoint)
    )
    if trigger_interval is None:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=trigger_interval)
    query = writer.start()
    query_id.append(str(query.id))
    started.set()
    return await_query(query, name, checkpoint)


@dataclass
class RunStats:
    batches: int = 0
    input_rows: int = 0
    seconds: float = 0.0


def await_query(
    query: StreamingQuery, label: str, checkpoint: str, echo: Callable[[str], None] = print
) -> RunStats:
    """Wait for the query to end, printing each batch; SIGINT/SIGTERM stop it cleanly.

    A clean stop waits for the running batch to commit, so a restart has nothing to redo.
    """
    stop = threading.Event()

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        if not stop.is_set():
            echo(f"{label}: {signal.Signals(signum).name} received, stopping after this batch")
        stop.set()

    previous = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    stats, seen_batch, started = RunStats(), -1, time.monotonic()
    try:
        while query.isActive:
            if stop.is_set() and not query.status["isTriggerActive"]:
                query.stop()
                break
            query.awaitTermination(1)
            for progress in query.recentProgress:
                if progress["batchId"] > seen_batch and progress["numInputRows"] > 0:
                    seen_batch = progress["batchId"]
                    stats.batches += 1
                    stats.input_rows += progress["numInputRows"]
                    echo(
                        f"{label}: batch {seen_batch} wrote {progress['numInputRows']:,} rows "
                        f"({progress.get('processedRowsPerSecond', 0):,.0f}/s), "
                        f"{stats.input_rows:,} this run"
                    )
        query.awaitTermination()
    except StreamingQueryException as error:
        raise LakehouseError(f"{label} failed: {explain(error, checkpoint)}") from None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    stats.seconds = time.monotonic() - started
    return stats


def explain(error: Exception, checkpoint: str = "its checkpoint") -> str:
    """The one line of a streaming failure that says what happened: never only the query's
    id, which is all Spark's own first line names."""
    text = _text(error)
    if re.search(r"STATE_STORE_\w*SCHEMA\w*NOT_COMPATIBLE|STATE_VERSION_MISMATCH", text):
        return (
            f"the state in {checkpoint} was written with another state schema than this "
            "code uses; state cannot be migrated in place: move the checkpoint aside and "
            "rerun to rebuild from the upstream table on a new checkpoint. Spark said: "
            + _first_line(text.split("exception: ")[-1])
        )
    if "KAFKA_DATA_LOSS" in text or "OffsetOutOfRange" in text:
        return (
            "Kafka no longer has offsets this stream has not read yet (aged out by retention "
            "or the topic was deleted); nothing was skipped. Reset deliberately by moving "
            "the checkpoint aside. Spark said: " + _first_line(text)
        )
    if "TimeoutException" in text or "Timed out waiting" in text:
        return "Kafka did not answer in time (is the broker up?): " + _first_line(text)
    return _own_error(text) or _spark_error(text) or _python_error(text) or _first_line(text)


def _text(error: BaseException) -> str:
    message = getattr(error, "getMessage", None)
    return str(message() if callable(message) else error)


# Spark's wrappers name where an error surfaced, not what it was.
_WRAPPERS = ("STREAM_FAILED", "FOREACH_BATCH_USER_FUNCTION_ERROR", "TASK_WRITE_FAILED")


def _own_error(text: str) -> str | None:
    """The project's own one-line errors, raised in a worker or in foreachBatch."""
    found = re.findall(
        r"^(?:[\w.]+\.)?((?:IntegrityError|QualityError|LakehouseError): .+)$", text, re.MULTILINE
    )
    return found[-1].strip()[:500] if found else None


def _spark_error(text: str) -> str | None:
    """`[ERROR_CLASS] message` of the innermost Spark error that is not a wrapper."""
    found = [
        (name, message)
        for name, message in re.findall(r"\[([A-Z][A-Z0-9_]+(?:\.[A-Z0-9_]+)*)\] ([^\n]+)", text)
        if name not in _WRAPPERS
    ]
    if not found:
        return None
    name, message = found[-1]
    return f"[{name}] {message.split(' SQLSTATE:')[0].strip()}"[:500]


def _python_error(text: str) -> str | None:
    """The `SomeError: message` line a Python worker or foreachBatch function raised."""
    found = re.findall(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception): .+)$", text, flags=re.MULTILINE)
    useful = [line for line in found if not line.startswith(("Py4JJavaError", "PythonException"))]
    return useful[-1].strip()[:500] if useful else None


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:500] if lines else "unknown error"
