"""What `lakehouse run` does: a layer's job (or the whole pipeline) once, as a walk of the
graph, or `run all --continuous`, the streams and gold's schedule kept going."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import partial
from typing import Any

from pyspark.sql import SparkSession

from lakehouse import definitions as pipeline
from lakehouse.core import versions
from lakehouse.core.console import echo, pairs
from lakehouse.core.settings import Settings
from lakehouse.graph.nodes import Graph, Node, select
from lakehouse.observe.lineage import LineageEvents
from lakehouse.runtime.streams import StreamRun
from lakehouse.runtime.supervise import run_all
from lakehouse.runtime.walk import observed
from lakehouse.storage import versions as stored
from lakehouse.storage.catalog import is_delta

STREAM_LAYERS = ("bronze", "silver")


@dataclass(frozen=True)
class LayerRun:
    """One `run` as asked for: which layer (or `all`), how its streams run, which models."""

    layer: str
    invocation: dict[str, Any]
    """The command's arguments, for run_results.json, with its name as `command`."""
    select: tuple[str, ...] = ()
    continuous: bool = False
    full_refresh: bool = False
    trace: frozenset[str] | None = None
    streams: tuple[str, ...] = STREAM_LAYERS
    """The streams `all` runs: a shadow's process runs those of its version only."""

    @property
    def continues(self) -> bool:
        """`run all --continuous`: the streams kept going and gold on its schedule."""
        return self.layer == "all" and self.continuous


def run(spark: SparkSession, settings: Settings, asked: LayerRun) -> None:
    """Run the layer `asked` for; the first failure of a node is raised once all have run."""
    graph = pipeline.graph(settings)
    models = select(
        graph, [f"{s},layer:gold,type:model" for s in asked.select] or ["layer:gold,type:model"]
    )
    if asked.continues:
        return run_continuously(spark, settings, graph, models, asked)
    if asked.layer in STREAM_LAYERS:
        nodes = select(graph, [asked.layer])
    elif asked.layer == "all":
        nodes = [*select(graph, list(asked.streams)), *models] if asked.streams else models
    else:
        nodes = models
    how = StreamRun(continuous=asked.continuous, full_refresh=asked.full_refresh, trace=asked.trace)
    runner = pipeline.NodeRunner(spark, settings, how, models_in_full=asked.full_refresh)
    sums_gold = asked.layer not in STREAM_LAYERS
    _walk_and_raise(settings, graph, nodes, runner, asked.invocation, sums_gold=sums_gold)


def run_continuously(
    spark: SparkSession, settings: Settings, graph: Graph, models: list[Node], asked: LayerRun
) -> None:
    """The streams side by side and gold on its schedule, supervised, until stopped."""
    # Each run of a stream (and each restart) tells OpenLineage, as a walk's nodes do.
    manifest = pipeline.manifest(settings, graph)
    command = asked.invocation["command"]
    lineage = pipeline.walk_lineage(spark, settings, manifest, command)
    streams = {
        node.name: partial(_run_stream, settings, node, asked.trace, lineage)
        for node in select(graph, list(asked.streams))
    }
    running = [f"the {name} stream" for name in streams]
    running.append(f"{len(models)} gold models every {settings.gold.every_seconds:g}s")
    echo(
        f"{'run all' if command == 'run' else command}: {' and '.join(running)}; Ctrl-C or "
        "SIGTERM stops each after its batch"
    )
    gold = partial(_run_gold, settings, graph, models, asked)
    run_all(spark, settings, streams, gold, partial(goes_on, settings))


def goes_on(settings: Settings, part: str) -> bool:
    """Whether the version of `part` these settings run is still live (or the shadow being
    built): a swap retires it, and it stops after its batch."""
    if part not in versions.PARTS:
        return True  # bronze has one version
    tag = versions.tag_of(settings.storage.versions.get(pipeline.VERSIONED[part][0], ""))
    try:
        now = stored.read(settings)
    except Exception:  # storage that does not answer now: the next look decides
        return True
    if now.continues(part, tag):
        return True
    echo(f"{part}: version {tag} retired ({now.live_tag(part)} is live): stopping after its batch")
    return False


def _run_stream(
    settings: Settings,
    node: Node,
    trace: frozenset[str] | None,
    lineage: LineageEvents | None,
    session: SparkSession,
    stop: threading.Event,
) -> None:
    how = StreamRun(continuous=True, trace=trace, stop=stop)
    runner = pipeline.NodeRunner(session, settings, how)
    (observed(runner, lineage) if lineage else runner)(node)


def _run_gold(
    settings: Settings, graph: Graph, models: list[Node], asked: LayerRun, session: SparkSession
) -> None:
    made_by_gold = {t for m in models for t in m.writes}
    upstream = sorted({t for m in models for t in m.reads} - made_by_gold)
    if waiting := [t for t in upstream if not is_delta(session, settings.storage.table_uri(t))]:
        # A new lake, or a shadow's catch-up: silver makes its tables as its stream starts,
        # which may come after gold's first turn; not a failure, a turn with nothing to read.
        echo(f"gold: waiting for {', '.join(waiting)}, which the silver stream makes as it starts")
        return
    runner = pipeline.NodeRunner(session, settings)
    _walk_and_raise(settings, graph, models, runner, asked.invocation, sums_gold=True)


def _walk_and_raise(
    settings: Settings,
    graph: Graph,
    nodes: list[Node],
    runner: pipeline.NodeRunner,
    invocation: dict[str, Any],
    *,
    sums_gold: bool,
) -> None:
    results = pipeline.walk(settings, graph, nodes, runner, invocation)
    if sums_gold:
        echo(gold_summary(runner))
    if failed := next((r.error for r in results if r.error is not None), None):
        raise failed  # the job's own one line, as a job that failed says it


def gold_summary(runner: pipeline.NodeRunner) -> str:
    """`gold: 3 models (incremental=2, unchanged=1), 12.3s`: what a walk's models did."""
    runs = runner.model_runs
    modes = {m: sum(r.mode == m for r in runs) for m in ("full", "incremental", "unchanged")}
    return (
        f"gold: {len(runs)} models ({pairs({k: v for k, v in modes.items() if v})}), "
        f"{sum(r.seconds for r in runs):.1f}s"
    )
