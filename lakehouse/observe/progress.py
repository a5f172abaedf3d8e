"""What the pipeline did, kept: one row per stream micro-batch, gold model run and check.

Every streaming query's progress is caught by a `StreamingQueryListener`, whatever command
runs the stream, and appended to its writer's progress table by the job's own loop (a
listener must not run Spark jobs on the listener bus, which it would hold up). What Spark's
progress does not know, the job notes while it writes the batch: rows offered to each
table, rows quarantined, violations by reason. Gold runs and checks are recorded from the
results of the walk that ran them, one commit per writer when it ends. The view
`ops.progress` unites the writers' tables; `lakehouse status`, the report's plots and a
SQL query all read it, and the same rows feed the Prometheus metrics.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import defaultdict
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQueryListener

from lakehouse.core import versions
from lakehouse.core.console import echo
from lakehouse.core.errors import explain, first_line
from lakehouse.core.settings import Settings, StorageSettings
from lakehouse.core.tables import TableSpec, columns_of
from lakehouse.observe import metrics
from lakehouse.storage import catalog, delta, lease
from lakehouse.storage.delta import Txn

PROGRESS_COLUMNS = """
    run_id STRING NOT NULL COMMENT 'the Spark application (one command) that did it',
    node STRING NOT NULL
        COMMENT 'what ran: bronze, silver, a gold model (gold.sensor_hourly) or a check',
    kind STRING NOT NULL COMMENT 'stream (one micro-batch), model (one run) or check',
    batch_id BIGINT COMMENT 'micro-batch of the stream; null for models and checks',
    started_at TIMESTAMP NOT NULL COMMENT 'when the batch (its trigger) or the node began (UTC)',
    duration_ms BIGINT COMMENT 'how long it took: the whole trigger of a batch, the whole node',
    status STRING NOT NULL COMMENT
        'success, warn or error; restarted: run all restarted it after a transient failure',
    input_rows BIGINT COMMENT 'rows read: by the batch, by a model from its inputs, by a check',
    input_rows_per_second DOUBLE COMMENT 'rate at which rows arrived since the last batch',
    processed_rows_per_second DOUBLE COMMENT 'rate at which the batch processed its rows',
    durations_ms MAP<STRING, BIGINT>
        COMMENT 'milliseconds per phase of the batch: addBatch, queryPlanning, walCommit ...',
    kafka_offsets_behind MAP<STRING, BIGINT>
        COMMENT 'topic/partition -> offsets from the end of the batch to the latest in Kafka',
    state_rows BIGINT COMMENT 'rows held in the state of the stream after the batch',
    state_memory_bytes BIGINT COMMENT 'memory the state stores used after the batch',
    rows_written MAP<STRING, BIGINT>
        COMMENT 'table -> rows offered it, as its quality gate counted them before quarantine',
    quarantined_rows BIGINT COMMENT 'rows its quality gate added to the layer quarantine',
    violations MAP<STRING, BIGINT> COMMENT 'reason -> protocol violations found (silver)',
    watermark TIMESTAMP COMMENT 'event-time watermark of the stream after the batch (UTC)',
    message STRING COMMENT 'what a model run or check reports, or why it failed',
    recorded_at TIMESTAMP NOT NULL COMMENT 'when the row was written (UTC)'
"""
WRITERS = ("bronze", "silver", "gold", "check")
"""Who records progress: the two streams, gold's model runs, the checks."""
VIEW = "ops.progress"
"""Every writer's progress as one view in the catalog, for SQL."""


COLUMN_NAMES = [c.name for c in columns_of(PROGRESS_COLUMNS)]


def progress_table(writer: str) -> TableSpec:
    """`ops.<writer>_progress`: one table per writing application, as with every table
    of the lake (on S3, Delta's log is safe for one writer only)."""
    return TableSpec(
        name=f"ops.{writer}_progress",
        grain="one row per stream micro-batch, gold model run or check",
        columns=PROGRESS_COLUMNS,
        writer={"gold": "lakehouse run gold", "check": "lakehouse check"}.get(
            writer, f"the {writer} stream"
        ),
    )


def read_progress(spark: SparkSession, storage: StorageSettings) -> DataFrame | None:
    """Every writer's progress as one frame; None before anything recorded any."""
    return catalog.read_united(spark, (storage.table_uri(progress_table(w).name) for w in WRITERS))


def create(spark: SparkSession, storage: StorageSettings, writer: str) -> str:
    """The writer's progress table (made if new) and the view over every writer's; its URI."""
    spec = progress_table(writer)
    uri = storage.table_uri(spec.name)
    if (uri, spark) in _created:
        return uri
    new = not catalog.is_delta(spark, uri)
    delta.create(spark, spec, uri)
    # The view names every writer's table there is: made again when one is new (or the
    # catalog lost it), not on every start of a stream.
    if not versions.is_versioned(uri) and (new or not spark.catalog.tableExists(VIEW)):
        names = [progress_table(w).name for w in WRITERS]
        catalog.unite(spark, VIEW, {name: storage.table_uri(name) for name in names})
    _created.add((uri, spark))
    return uri


_created: set[tuple[str, SparkSession]] = set()
"""Tables this process made (or found) already: a gold run records a row per model."""


def append_rows(spark: SparkSession, uri: str, rows: list[dict[str, Any]]) -> None:
    """Append progress rows (dicts by column) to the table at `uri`."""
    if not rows:
        return
    known = {"run_id": spark.sparkContext.applicationId, "recorded_at": datetime.now(UTC)}
    values = [tuple(known[c] if c in known else row.get(c) for c in COLUMN_NAMES) for row in rows]
    delta.append(spark.createDataFrame(values, PROGRESS_COLUMNS), uri)


def batch_row(progress: Mapping[str, Any], node: str, notes: Mapping[str, Any]) -> dict[str, Any]:
    """A progress table row from one of Spark's `StreamingQueryProgress` (as parsed JSON)
    and what the job noted while writing that batch."""
    behind = {}
    for source in progress.get("sources", []):
        end, latest = _offsets(source.get("endOffset")), _offsets(source.get("latestOffset"))
        # A Kafka source's offsets: {topic: {partition: offset}}; a Delta source has none
        # by partition, and silver's lag on bronze is `lakehouse status`'s to compute.
        for topic, partitions in latest.items():
            if isinstance(partitions, dict) and isinstance(end.get(topic), dict):
                for partition, offset in partitions.items():
                    behind[f"{topic}/{partition}"] = int(offset) - int(
                        end[topic].get(partition, offset)
                    )
    counted = int(progress.get("numInputRows", 0))
    # The job's own count where it has one: Spark's counts the source's rows once per plan
    # that read them, and so do the rates it derives from it.
    exact = int(notes.get("input_rows", counted))
    scale = exact / counted if counted else 1.0
    state = progress.get("stateOperators", [])
    watermark = progress.get("eventTime", {}).get("watermark")
    durations = {k: int(v) for k, v in progress.get("durationMs", {}).items()}
    return {
        "node": node,
        "kind": "stream",
        "batch_id": int(progress["batchId"]),
        "started_at": _instant(progress["timestamp"]),
        "duration_ms": durations.get("triggerExecution"),
        "status": "success",
        "input_rows": exact,
        "input_rows_per_second": _scaled(_rate(progress.get("inputRowsPerSecond")), scale),
        "processed_rows_per_second": _scaled(_rate(progress.get("processedRowsPerSecond")), scale),
        "durations_ms": durations,
        "kafka_offsets_behind": behind or None,
        "state_rows": sum(int(s.get("numRowsTotal", 0)) for s in state) if state else None,
        "state_memory_bytes": sum(int(s.get("memoryUsedBytes", 0)) for s in state)
        if state
        else None,
        "rows_written": dict(notes.get("rows_written", {})) or None,
        "quarantined_rows": notes.get("quarantined_rows", 0),
        "violations": dict(notes.get("violations", {})) or None,
        "watermark": _instant(watermark) if watermark else None,
    }


def _offsets(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _rate(value: Any) -> float | None:
    # Spark leaves out (or writes as NaN) a rate it cannot know, e.g. a run's first batch.
    rate = None if value is None else float(value)
    return rate if rate is not None and math.isfinite(rate) else None


def _scaled(rate: float | None, scale: float) -> float | None:
    return None if rate is None else rate * scale


class Recorder(StreamingQueryListener):
    """The listener, and what it holds until the job's loop appends it: the progress of
    each executed batch, by query id, joined with the job's notes on that batch."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._notes: dict[tuple[str, int], dict[str, Any]] = defaultdict(dict)
        self._pending: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self._nodes: dict[str, str] = {}
        self._seen: dict[str, int] = {}
        self._inputs: dict[tuple[str, int], int] = {}

    def follow(self, query_id: str, node: str) -> None:
        """Record the batches of the query `query_id` as those of `node`."""
        with self._lock:
            self._nodes[query_id] = node

    def note(self, txn: Txn, **counts: Any) -> None:
        """Add what a batch's writer knows about it: `rows_written={table: n}`,
        `quarantined_rows=n`, `violations={reason: n}`; dicts and numbers add up."""
        with self._lock:
            noted = self._notes[(txn.app_id, txn.version)]
            for key, value in counts.items():
                if isinstance(value, Mapping):
                    into = noted.setdefault(key, {})
                    for k, v in value.items():
                        into[k] = into.get(k, 0) + v
                else:
                    noted[key] = noted.get(key, 0) + value

    def take(self, query_id: str) -> list[dict[str, Any]]:
        """The rows of `query_id` recorded since the last take."""
        with self._lock:
            return self._pending.pop(query_id, [])

    def put_back(self, query_id: str, rows: list[dict[str, Any]]) -> None:
        """Hold `rows` (taken, then not appended) again, before any recorded since."""
        with self._lock:
            self._pending[query_id][:0] = rows

    def input_rows(self, query_id: str, batch_id: int, counted: int) -> int:
        """The batch's input rows as its row has them (the job's own count where it noted
        one), once the listener has it; Spark's `counted` if it does not come."""
        self.wait_for(query_id, batch_id, timeout_s=2)
        with self._lock:
            return self._inputs.pop((query_id, batch_id), counted)

    def wait_for(self, query_id: str, batch_id: int, timeout_s: float = 10) -> None:
        """Wait until the progress of `batch_id` has reached the listener: the listener bus
        delivers it after the query may have ended."""
        deadline = time.monotonic() + timeout_s
        while self._seen.get(query_id, -1) < batch_id and time.monotonic() < deadline:
            time.sleep(0.05)

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = json.loads(event.progress.json)
        query_id, batch_id = str(progress["id"]), int(progress["batchId"])
        # An idle trigger reports progress too, without having run a batch: no addBatch.
        if "addBatch" not in progress.get("durationMs", {}):
            return
        with self._lock:
            node = self._nodes.get(query_id)
            notes = self._notes.pop((query_id, batch_id), {})
            self._seen[query_id] = max(batch_id, self._seen.get(query_id, -1))
            if node is not None:
                row = batch_row(progress, node, notes)
                self._pending[query_id].append(row)
                if row["input_rows"]:  # what the job's loop asks about: batches with input
                    self._inputs[(query_id, batch_id)] = row["input_rows"]
                metrics.observe(row)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


def listen(spark: SparkSession) -> Recorder:
    """The recorder of this session's streams, made and registered at the first call. A
    stream's job passes it to what notes its batches (its writer, its gate): inside
    `foreachBatch` the batch's session is a clone, which has none."""
    recorder: Recorder | None = getattr(spark, "_lakehouse_recorder", None)
    if recorder is None:
        recorder = Recorder()
        spark.streams.addListener(recorder)
        spark._lakehouse_recorder = recorder  # type: ignore[attr-defined]
    return recorder


FLUSH_EVERY_S = 10.0
"""How often a running stream appends the progress it holds: one commit per interval,
not one per batch, beside batches that may take less."""


class StreamRecording:
    """The recording of one running query's batches into its writer's progress table."""

    def __init__(self, spark: SparkSession, node: str, uri: str, query_id: str) -> None:
        self.spark, self.uri, self.query_id = spark, uri, query_id
        self.recorder = listen(spark)
        self.recorder.follow(query_id, node)
        self._flushed = time.monotonic()

    def flush(self, force: bool = False) -> None:
        """Append what the listener holds, at most every FLUSH_EVERY_S unless `force`."""
        if force or time.monotonic() - self._flushed >= FLUSH_EVERY_S:
            rows = self.recorder.take(self.query_id)
            self._flushed = time.monotonic()
            try:
                append_rows(self.spark, self.uri, rows)
            except Exception:
                self.recorder.put_back(self.query_id, rows)  # for the next flush to try again
                raise

    def input_rows(self, batch_id: int, counted: int) -> int:
        """The batch's input rows as recorded: see `Recorder.input_rows`."""
        return self.recorder.input_rows(self.query_id, batch_id, counted)

    def close(self, last_batch: int) -> None:
        """Append everything up to `last_batch`, the query's last executed batch."""
        self.recorder.wait_for(self.query_id, last_batch)
        self.flush(force=True)


NODE_WRITERS = {"model": "gold", "check": "check"}
"""Which progress table a node of each kind is recorded in (streams record their batches)."""


def record_event(
    spark: SparkSession, settings: Settings, node: str, kind: str, status: str, message: str
) -> None:
    """One row of what befell a part of `run all` outside any batch: restarted after a
    transient failure, or failed for good."""
    row = {
        "node": node,
        "kind": kind,
        "started_at": datetime.now(UTC),
        "batch_id": None,
        "status": status,
        "message": first_line(message),
    }
    metrics.observe(row)
    keep(spark, settings, node if kind == "stream" else NODE_WRITERS[kind], [row])


def keep(spark: SparkSession, settings: Settings, writer: str, rows: list[dict[str, Any]]) -> None:
    """Append `rows` to the writer's progress table under its lease; failing to is a line,
    never the failure of what they record."""
    spec = progress_table(writer)
    try:
        with lease.holding(settings, [spec.name], spec.writer):
            uri = create(spark, settings.storage, writer)
            append_rows(spark, uri, rows)
    except Exception as error:
        echo(f"{spec.name}: {len(rows)} rows not recorded: {first_line(explain(error))}")
