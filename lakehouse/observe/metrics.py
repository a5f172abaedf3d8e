"""Prometheus metrics: the progress rows of this process as the ecosystem's client library
serves them (`metrics.enabled`), so that what a scrape shows is what `ops.progress` keeps.

Metric names and alert rules to start from: docs/operations.md (Metrics).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from lakehouse.core.console import echo
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import MetricsSettings

REGISTRY = CollectorRegistry()
"""The project's figures only: not the client's default process and GC collectors."""

_NODE = ("node",)
BATCHES = Counter("lakehouse_batches", "Micro-batches a stream ran", _NODE, registry=REGISTRY)
INPUT_ROWS = Counter(
    "lakehouse_input_rows", "Rows read by streams' batches", _NODE, registry=REGISTRY
)
LAST_BATCH = Gauge("lakehouse_last_batch_id", "Id of the last batch run", _NODE, registry=REGISTRY)
LAST_BATCH_END = Gauge(
    "lakehouse_last_batch_end_timestamp_seconds",
    "When the last batch ended (Unix time)",
    _NODE,
    registry=REGISTRY,
)
INPUT_RATE = Gauge(
    "lakehouse_input_rows_per_second",
    "Rate rows arrived at in the last batch",
    _NODE,
    registry=REGISTRY,
)
PROCESSED_RATE = Gauge(
    "lakehouse_processed_rows_per_second",
    "Rate the last batch processed its rows at",
    _NODE,
    registry=REGISTRY,
)
BATCH_SECONDS = Gauge(
    "lakehouse_batch_duration_seconds", "Duration of the last batch", _NODE, registry=REGISTRY
)
PHASE_SECONDS = Gauge(
    "lakehouse_batch_phase_seconds",
    "Spark's phases of the last batch (addBatch, queryPlanning, walCommit ...)",
    ("node", "phase"),
    registry=REGISTRY,
)
KAFKA_BEHIND = Gauge(
    "lakehouse_kafka_offsets_behind",
    "Offsets from the end of the last batch to the latest in Kafka",
    ("topic", "partition"),
    registry=REGISTRY,
)
STATE_ROWS = Gauge(
    "lakehouse_state_rows",
    "Rows in a stream's state after its last batch",
    _NODE,
    registry=REGISTRY,
)
STATE_BYTES = Gauge(
    "lakehouse_state_memory_bytes",
    "Memory of a stream's state stores after its last batch",
    _NODE,
    registry=REGISTRY,
)
WATERMARK = Gauge(
    "lakehouse_watermark_timestamp_seconds",
    "A stream's event-time watermark (Unix time)",
    _NODE,
    registry=REGISTRY,
)
ROWS_WRITTEN = Counter(
    "lakehouse_rows_written",
    "Rows offered to a table (before its gate quarantined any)",
    ("node", "table"),
    registry=REGISTRY,
)
QUARANTINED = Counter(
    "lakehouse_quarantined_rows", "Rows a quality gate quarantined", _NODE, registry=REGISTRY
)
VIOLATIONS = Counter(
    "lakehouse_violations", "Protocol violations silver found", ("reason",), registry=REGISTRY
)
NODE_RUNS = Counter(
    "lakehouse_node_runs",
    "Gold model runs and checks, by how they ended",
    ("node", "kind", "status"),
    registry=REGISTRY,
)
NODE_SECONDS = Gauge(
    "lakehouse_node_duration_seconds",
    "Duration of a model's or check's last run",
    _NODE,
    registry=REGISTRY,
)

RESTARTS = Counter(
    "lakehouse_restarts",
    "Parts of `run all` restarted after a transient failure",
    _NODE,
    registry=REGISTRY,
)


def observe(row: Mapping[str, Any]) -> None:
    """Count one progress row (progress.py's columns) into the metrics."""
    node = row["node"]
    if row["status"] == "restarted":  # an event of `run all`, not a batch or a run
        RESTARTS.labels(node).inc()
        return
    if row["kind"] == "stream" and row.get("batch_id") is None:  # a stream failed for good
        return
    for table, rows in (row.get("rows_written") or {}).items():
        ROWS_WRITTEN.labels(node, table).inc(rows)
    QUARANTINED.labels(node).inc(row.get("quarantined_rows") or 0)
    if row["kind"] != "stream":
        NODE_RUNS.labels(node, row["kind"], row["status"]).inc()
        NODE_SECONDS.labels(node).set((row.get("duration_ms") or 0) / 1000)
        return
    BATCHES.labels(node).inc()
    INPUT_ROWS.labels(node).inc(row.get("input_rows") or 0)
    LAST_BATCH.labels(node).set(row["batch_id"])
    duration = (row.get("duration_ms") or 0) / 1000
    LAST_BATCH_END.labels(node).set(_unix(row["started_at"]) + duration)
    BATCH_SECONDS.labels(node).set(duration)
    for gauge, key in ((INPUT_RATE, "input_rows_per_second"),
                       (PROCESSED_RATE, "processed_rows_per_second"),
                       (STATE_ROWS, "state_rows"),
                       (STATE_BYTES, "state_memory_bytes")):  # fmt: skip
        if row.get(key) is not None:
            gauge.labels(node).set(row[key])
    for phase, ms in (row.get("durations_ms") or {}).items():
        PHASE_SECONDS.labels(node, phase).set(ms / 1000)
    for where, behind in (row.get("kafka_offsets_behind") or {}).items():
        topic, _, partition = where.rpartition("/")
        KAFKA_BEHIND.labels(topic, partition).set(behind)
    for reason, count in (row.get("violations") or {}).items():
        VIOLATIONS.labels(reason).inc(count)
    if row.get("watermark") is not None:
        WATERMARK.labels(node).set(_unix(row["watermark"]))


SERVERS = ("bronze", "silver", "gold", "build", "all")
"""What serves metrics, each at its own port from `metrics.port` on, so that the streams
and gold run side by side (`run bronze --continuous &`, `run silver --continuous &`)."""


def port_of(settings: MetricsSettings, command: str) -> int:
    return settings.port + SERVERS.index(command)


def serve(settings: MetricsSettings, command: str) -> None:
    """Serve the metrics on 127.0.0.1 at the command's port, if enabled, for as long as
    this process runs."""
    if not settings.enabled:
        return
    port = port_of(settings, command)
    try:
        start_http_server(port, addr="127.0.0.1", registry=REGISTRY)
    except OSError as error:
        raise LakehouseError(
            f"cannot serve metrics on 127.0.0.1:{port} (metrics.port + "
            f"{SERVERS.index(command)} for {command}): {error.strerror or error}"
        ) from None
    echo(f"metrics for Prometheus: http://127.0.0.1:{port}/metrics")


def _unix(instant: datetime) -> float:
    return instant.timestamp()
