"""Walking the graph: run each selected node in dependency order, record what happened.

A node that fails (an exception, or a check whose `fail` expectation failed) stops every
selected node downstream of it, which is reported as skipped; independent branches go
on. Every walk (`run`, `check`, `build`) leaves `run_results.json` and `manifest.json`
under `<local_state>/runs/<run id>/`, the latest also in `<local_state>/`, in dbt's spirit
(docs/operations.md, "Build: the graph, selection, run results").
"""

from __future__ import annotations

import json
import shutil
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from pyspark.sql import SparkSession

from lakehouse.core.console import echo
from lakehouse.core.errors import explain, first_line
from lakehouse.core.settings import Settings
from lakehouse.graph.nodes import Graph, Node
from lakehouse.observe import metrics, progress
from lakehouse.observe.lineage import Assertion, LineageEvents
from lakehouse.quality.store import new_run_id

NodeStatus = Literal["success", "warn", "error", "skipped"]
KEPT_RUNS = 10
"""Run folders kept under `<local_state>/runs/`; older ones are deleted."""


@dataclass
class Done:
    """What running one node did, as the node's runner reports it."""

    status: NodeStatus = "success"
    rows_written: int | None = None
    rows_read: int | None = None
    failures: int | None = None
    """Expectations that did not hold (checks and gated writes)."""
    quarantined: int | None = None
    """Rows a gated write kept out of its table."""
    message: str = ""
    assertions: tuple[Assertion, ...] = ()
    """A check's expectations with their outcomes, for its lineage events."""


@dataclass
class NodeResult:
    """One entry of `run_results.json`."""

    unique_id: str
    kind: str
    status: NodeStatus
    started_at: str
    completed_at: str
    execution_time: float
    rows_written: int | None = None
    rows_read: int | None = None
    failures: int | None = None
    quarantined: int | None = None
    message: str = ""
    error: BaseException | None = field(default=None, repr=False)
    """The exception that failed the node, for a caller that re-raises it (not written)."""

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "error"}


def execute(
    graph: Graph,
    nodes: Sequence[Node],
    run_node: Callable[[Node], Done],
    echo: Callable[[str], None] = echo,
) -> list[NodeResult]:
    """Run `nodes` (a selection of `graph`, in its order) one after the other, each
    unless a selected node upstream of it failed or was skipped."""
    selected = {n.name for n in nodes}
    results: dict[str, NodeResult] = {}
    width = len(str(len(nodes)))
    for position, node in enumerate(nodes, 1):
        prefix = f"[{position:>{width}}/{len(nodes)}] {node.kind} {node.name}"
        started, started_at = time.monotonic(), _now()
        blocked = sorted(
            p
            for p in graph.parents[node.name] & selected
            if results[p].status in ("error", "skipped")
        )
        error: BaseException | None = None
        if blocked:
            done = Done("skipped", message=f"upstream {', '.join(blocked)} did not succeed")
        else:
            try:
                done = run_node(node)
            except Exception as failure:  # any failure of a node is its result, not ours
                error = failure
                done = Done("error", message=explain(failure))
        seconds = time.monotonic() - started
        results[node.name] = NodeResult(
            node.name,
            node.kind,
            done.status,
            started_at,
            _now(),
            round(seconds, 3),
            done.rows_written,
            done.rows_read,
            done.failures,
            done.quarantined,
            done.message,
            error,
        )
        detail = f": {done.message}" if done.message else ""
        echo(f"{prefix} {done.status.upper()} ({seconds:.1f}s){detail}")
    return list(results.values())


class Runner(Protocol):
    """Runs one node in a Spark session; holds what a walk needs until it ends."""

    spark: SparkSession

    def __call__(self, node: Node) -> Done: ...

    def __enter__(self) -> Runner: ...

    def __exit__(self, *_: object) -> None: ...


def walk(
    settings: Settings,
    graph: Graph,
    nodes: list[Node],
    runner: Runner,
    invocation: Mapping[str, Any],
    manifest: Mapping[str, Any],
    lineage: LineageEvents | None = None,
) -> list[NodeResult]:
    """Run `nodes` with `runner`, record each in the progress tables, then write
    run_results.json (with the command's `invocation`) and `manifest` (also when a node
    raised: the results so far). `lineage` hears of each node's start and end."""
    started, run_id = time.monotonic(), new_run_id()
    results: list[NodeResult] = []
    try:
        with runner:
            results = execute(graph, nodes, observed(runner, lineage) if lineage else runner)
    finally:
        record_nodes(runner.spark, settings, results)
        folder = write_artifacts(
            settings.storage.local_state_dir,
            run_id,
            invocation,
            results,
            manifest,
            time.monotonic() - started,
        )
        echo(f"run results: {folder / 'run_results.json'}")
    return results


def observed(run_node: Callable[[Node], Done], lineage: LineageEvents) -> Callable[[Node], Done]:
    """`run_node`, telling `lineage` as each node starts and as it ends (FAIL for an error,
    a raised one or a check's verdict)."""

    def run(node: Node) -> Done:
        run_id = lineage.start(node.name)
        try:
            done = run_node(node)
        except Exception as failure:
            lineage.end(node.name, run_id, failed=failure)
            raise
        failed = (done.message or done.status) if done.status == "error" else None
        wrote = done.rows_written is None or done.rows_written > 0
        lineage.end(node.name, run_id, failed, done.assertions, wrote)
        return done

    return run


def tally(results: Sequence[NodeResult]) -> str:
    """`success=3 warn=1 error=1 skipped=2`, the kinds of outcome that happened."""
    counts = {
        s: sum(r.status == s for r in results) for s in ("success", "warn", "error", "skipped")
    }
    return " ".join(f"{s}={n}" for s, n in counts.items() if n) or "nothing ran"


def write_artifacts(
    state_dir: Path,
    run_id: str,
    args: Mapping[str, Any],
    results: Sequence[NodeResult],
    manifest: Mapping[str, Any],
    elapsed: float,
) -> Path:
    """Write `run_results.json` and `manifest.json` for this walk; the run folder."""
    folder = state_dir / "runs" / run_id
    folder.mkdir(parents=True, exist_ok=True)
    metadata = {"invocation_id": run_id, "generated_at": _now(), "args": dict(args)}
    documents = {
        "run_results.json": {
            "metadata": metadata,
            "elapsed_time": round(elapsed, 3),
            "results": [r.to_json() for r in results],
        },
        "manifest.json": {"metadata": metadata, **manifest},
    }
    for name, document in documents.items():
        text = json.dumps(document, indent=2, default=str) + "\n"
        (folder / name).write_text(text)
        latest = state_dir / name
        latest.with_suffix(".tmp").write_text(text)
        latest.with_suffix(".tmp").replace(latest)  # a reader never sees half a file
    runs = sorted(p for p in (state_dir / "runs").iterdir() if p.is_dir())
    for old in runs[:-KEPT_RUNS]:
        shutil.rmtree(old, ignore_errors=True)
    return folder


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def record_nodes(spark: SparkSession, settings: Settings, results: Sequence[NodeResult]) -> None:
    """Count the model runs and checks of a walk into the metrics and append them to their
    writers' progress tables, one commit per writer."""
    by_writer: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for result in results:
        if result.kind in progress.NODE_WRITERS and result.status != "skipped":
            row = node_row(result)
            metrics.observe(row)
            by_writer[progress.NODE_WRITERS[result.kind]].append(row)
    for writer, rows in by_writer.items():
        progress.keep(spark, settings, writer, rows)


def node_row(result: NodeResult) -> dict[str, Any]:
    """A progress table row for a gold model's run or a check, from its walk's result."""
    return {
        "node": result.unique_id,
        "kind": result.kind,
        "started_at": datetime.fromisoformat(result.started_at),
        "duration_ms": int(result.execution_time * 1000),
        "status": result.status,
        "input_rows": result.rows_read,
        "rows_written": {result.unique_id: result.rows_written}
        if result.rows_written is not None
        else None,
        "quarantined_rows": result.quarantined,
        "message": first_line(result.message) if result.message else None,
    }
