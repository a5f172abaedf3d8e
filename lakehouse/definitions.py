"""The pipeline in one place: its graph of nodes (streams, models, checks), every table,
who reads what incrementally, and what running a node means.

It gathers the layers below it into one graph; `ops`, above it, reads them for the
operator's commands, and the CLI reaches both without importing a layer. `run`, `check`,
`build` and `ls` walk the graph it declares, compaction checks VACUUM against the readers
it lists, the manifest and the report describe the tables it lists, and a test loads it,
so that a layer that no longer fits breaks there first. A new gold model needs no entry here:
models are found by scanning `gold/`; a new suite in `expectations/` is a new check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from pyspark.sql import SparkSession

import bronze
import gold
import silver
from bronze import kafka_changes, sensor_records
from lakehouse.core import versions
from lakehouse.core.console import echo
from lakehouse.core.settings import Settings
from lakehouse.core.tables import TableSpec, columns_of
from lakehouse.graph.models import Model, declared_models, dependency_order
from lakehouse.graph.nodes import Graph, Kind, Node, check_name, graph_of
from lakehouse.observe import lineage, progress
from lakehouse.quality import store
from lakehouse.quality.suites import Suite, load_suites
from lakehouse.runtime import walk as execute
from lakehouse.runtime.incremental import ModelRun
from lakehouse.runtime.streams import TO_THE_END, RunStats, Stream, StreamRun, declared_streams
from lakehouse.runtime.walk import Done, NodeResult, NodeStatus
from lakehouse.services.kafka import resolve_bootstrap
from lakehouse.storage import compaction, lease
from lakehouse.storage.model_runs import RUNS
from lakehouse.storage.positions import Reader
from silver import reconstruct, row_changes, session_rows, sessions, violations

STREAMS: dict[str, Stream] = {s.layer: s for s in declared_streams(bronze, silver)}
"""Every stream, by layer, found in the layers' modules as models are."""

STREAM_TABLES = frozenset(t for s in STREAMS.values() for t in s.writes)
"""Every table a stream writes: while it runs, it holds their leases on S3 and compacts them."""

KAFKA_RECORDS = sensor_records.NAME
"""The table of every Kafka record with its timestamp."""
LINEAGE_TABLES = (row_changes.NAME, violations.NAME)
"""Silver tables whose rows name the Kafka record they come from, by every batch."""

MODELS: tuple[Model, ...] = tuple(dependency_order(declared_models(gold)))
"""Every gold model, each after the models it reads."""


READERS: tuple[Reader, ...] = (
    *(
        Reader(f"the {s.layer} stream", s.reads, checkpoint=s.checkpoint)
        for s in STREAMS.values()
        if s.reads != "kafka"
    ),
    *(Reader(m.name, table, model=m.name) for m in MODELS for table in m.reads),
)


TABLES: dict[str, TableSpec] = {
    spec.name: spec
    for spec in (
        sensor_records.TABLE,
        kafka_changes.TABLE,
        *reconstruct.SILVER_TABLES,
        *(m.table for m in MODELS),
        RUNS,
        *(store.quarantine_table(layer) for layer in ("bronze", "silver", "gold")),
        *(store.results_table(writer) for writer in store.WRITERS),
        *(progress.progress_table(writer) for writer in progress.WRITERS),
    )
}
"""Every table of the lake, by name."""

VERSIONED: dict[str, tuple[str, ...]] = {
    "silver": (*STREAMS["silver"].writes, STREAMS["silver"].checkpoint),
    "gold": tuple(name for name, spec in TABLES.items() if spec.writer == RUNS.writer),
}
"""What a version of each part holds (`core/versions.py`): silver's stream, its checkpoint
and every table it writes; gold's models with their run log, results and progress."""

COMPARED: dict[str, tuple[str, ...]] = {
    sessions.NAME: sessions.KEY,
    session_rows.NAME: session_rows.KEY,
    violations.NAME: ("topic", "partition", "offset", "reason"),
    **{m.name: tuple(m.key) for m in MODELS},
}
"""The tables `lakehouse shadow compare` holds side by side, each by its key: a record's
violations by the record and reason."""


def at_versions(settings: Settings, shadow: bool = False) -> Settings:
    """`settings` working on the lake's live versions, or on its shadow's (`shadow`)."""
    from lakehouse.storage import versions as stored

    return at_tags(settings, stored.read(settings).tags(shadow))


def at_tags(settings: Settings, tags: dict[str, str]) -> Settings:
    """`settings` working on the given version (tag) of each part."""
    placed = replace(settings.storage, versions=versions.folders(VERSIONED, tags))
    return replace(settings, storage=placed)


GOLD_WRITES = (
    RUNS.name,
    store.results_table("gold").name,
    store.quarantine_table("gold").name,
)
"""What every gold model's run also writes: the run log, its results and quarantine."""


def graph(settings: Settings) -> Graph:
    """The pipeline's graph: the streams, each gold model, and a check per suite."""
    streams = [
        Node(
            layer,
            "stream",
            layer,
            (stream.reads,),
            stream.writes,
            f"the {layer} stream ({'Kafka' if stream.reads == 'kafka' else stream.reads} -> "
            f"{', '.join(stream.writes[:1])} ...)",
            stream,
        )
        for layer, stream in STREAMS.items()
    ]
    models = [
        Node(m.name, "model", m.table.layer, m.reads, (m.name,), m.table.grain, m) for m in MODELS
    ]
    checks = [
        Node(
            check_name(suite.table),
            "check",
            suite.layer,
            (suite.table, *suite.inputs),
            (store.results_table("check").name,),
            f"the suite {suite.path.name} over the whole of {suite.table}",
            suite,
        )
        for suite in load_suites(settings.quality.suites_dir)
    ]
    return graph_of([*streams, *models, *checks])


def manifest(settings: Settings, pipeline: Graph) -> dict[str, Any]:
    """`manifest.json`: every node with what it depends on, reads and writes; every
    table with its grain, columns (documented) and suite."""
    suites = {n.runs.table: n.runs for n in pipeline.nodes if isinstance(n.runs, Suite)}
    return {
        "nodes": {
            n.name: {
                "kind": n.kind,
                "layer": n.layer,
                "description": n.description,
                "depends_on": sorted(pipeline.parents[n.name]),
                "reads": list(n.reads),
                "writes": list(n.writes),
            }
            for n in pipeline.nodes
        },
        "tables": {
            name: {
                "grain": spec.grain,
                "writer": spec.writer,
                "location": settings.storage.table_uri(name),
                "columns": [
                    {"name": c.name, "type": c.type, "description": c.description}
                    for c in columns_of(spec.columns)
                ],
                "suite": _suite_entry(suites.get(name)),
            }
            for name, spec in sorted(TABLES.items())
        },
    }


def _suite_entry(suite: Suite | None) -> dict[str, Any] | None:
    if suite is None:
        return None
    return {
        "path": str(suite.path),
        "inputs": list(suite.inputs),
        "expectations": [
            {"name": c.name, "severity": c.severity, "type": c.type, "in_stream": c.in_stream}
            for c in suite.checks
        ],
    }


def walk_lineage(
    spark: SparkSession, settings: Settings, manifest: dict[str, Any], command: str
) -> lineage.LineageEvents | None:
    """The lineage events of a walk that `command` makes (None: `lineage.transport` off)."""
    return lineage.LineageEvents.of(
        settings.lineage,
        settings.storage.local_state_dir,
        manifest,
        command,
        kafka=lambda: lineage.kafka_dataset(
            resolve_bootstrap(settings), settings.kafka.topic_pattern
        ),
        column_sources=lambda node: _column_sources(spark, node),
    )


_COLUMN_SOURCES: dict[str, lineage.ColumnSources] = {}


def _column_sources(spark: SparkSession, node: str) -> lineage.ColumnSources | None:
    """A gold model's column lineage, from its build's analyzed plan over empty inputs of
    its inputs' declared columns: no data read, once per model and process."""
    model = {m.name: m for m in MODELS}.get(node)
    if model is None:
        return None
    if node not in _COLUMN_SOURCES:
        inputs = [spark.createDataFrame([], TABLES[t].columns).alias(t) for t in model.reads]
        _COLUMN_SOURCES[node] = lineage.column_sources(model.build(*inputs))
    return _COLUMN_SOURCES[node]


def run_stream(
    spark: SparkSession, settings: Settings, stream: Stream, how: StreamRun = TO_THE_END
) -> RunStats:
    """Run `stream` as the pipeline runs it: compacting the tables it writes between its
    batches, as far as their readers (`READERS`) allow."""
    compact = compaction.between_batches(spark, settings, stream.writes, READERS)
    return stream.run(spark, settings, replace(how, after_batch=compact))


@dataclass
class NodeRunner:
    """Runs one node of the graph in this Spark application: a stream to its end of input
    (or on, with `continuous`), a model incrementally, a check over its whole table."""

    spark: SparkSession
    settings: Settings
    streams: StreamRun = TO_THE_END
    """How its streams run; a full refresh starts a new checkpoint whose first batch
    replaces their tables."""
    models_in_full: bool = False
    """Models: rebuilt from their inputs instead of incrementally."""
    since: str | None = None
    """Checks: only the rows written since (`check --since`)."""
    model_runs: list[ModelRun] = field(default_factory=list)
    """What each model node did, in the order they ran."""
    _recorded: int = 0
    """How many of `model_runs` are in the run log (`_record_models`)."""
    _held: ExitStack = field(default_factory=ExitStack)

    def __call__(self, node: Node) -> Done:
        run: Callable[[NodeRunner, Any], Done] = _RUNS[node.kind]
        return run(self, node.runs)

    def _stream(self, stream: Stream) -> Done:
        stats = run_stream(self.spark, self.settings, stream, self.streams)
        lines = stream.summary(self.spark, self.settings, stats)
        for line in lines:
            echo(line)
        return Done(rows_read=stats.input_rows, message=lines[0])

    def _model(self, model: Model) -> Done:
        from lakehouse.runtime.incremental import run_models

        self._gold_books  # noqa: B018 (held from the walk's first model to its end)
        with lease.holding(self.settings, [model.name], "lakehouse run gold"):
            (run,) = run_models(
                self.spark,
                self.settings.storage,
                [model],
                self.models_in_full,
                int(self.settings.gold.full_refresh_below_mb * 2**20),
                gate=self._gold_gate,
                history=self._run_log,
                record=False,
            )
        self.model_runs.append(run)
        reason = f" ({run.reason})" if run.reason else ""
        quarantined = f", {run.quarantined:,} rows quarantined" if run.quarantined else ""
        status: NodeStatus = "warn" if run.quarantined else "success"
        return Done(
            status,
            rows_written=run.rows_written,
            quarantined=run.quarantined,
            message=f"{run.mode}{reason}{quarantined}",
        )

    @cached_property
    def _run_log(self) -> dict[str, dict[str, tuple[int, str]]]:
        """What each model's last run processed, read once per walk: a model's own entry
        changes only when it runs, and it runs once in a walk."""
        from lakehouse.runtime.incremental import run_log

        return run_log(self.spark, self.settings.storage)

    @cached_property
    def _gold_books(self) -> None:
        """The leases of what every model's run writes besides its table (`GOLD_WRITES`),
        held until the walk's end, where the runs are recorded in one commit per table."""
        self._held.enter_context(lease.holding(self.settings, GOLD_WRITES, "lakehouse run gold"))

    @cached_property
    def _gold_gate(self) -> Any:
        from lakehouse.quality.gates import write_gate

        return write_gate(self.settings.quality, self.settings.storage, "gold")

    def _record_models(self) -> None:
        """Record the walk's model runs not recorded yet, with their gate's results, in a
        commit a table: at the walk's end, and before a check, which binds a model's
        reconciliation to the input versions its last recorded run read."""
        from lakehouse.runtime.incremental import record_runs

        if "_gold_gate" in self.__dict__:  # a model ran: its runs and results may be due
            gate, pending = self._gold_gate, self.model_runs[self._recorded :]
            record_runs(self.spark, self.settings.storage, gate.run_id, pending, gate)
            self._recorded = len(self.model_runs)

    def _check(self, suite: Suite) -> Done:
        table = suite.table
        self._record_models()
        checked = self._checker.check(table, self.since)
        if checked is None:
            return Done("skipped", message=f"{table} is not built yet")
        failed = checked.failed
        names = ", ".join(o.describe() for o in failed)
        verdict: NodeStatus = "error" if checked.blocking else "warn" if failed else "success"
        rows_read: int | None = checked.rows
        if checked.reused:  # nothing read: the outcome of the same versions' last check
            names = "; ".join(filter(None, ("unchanged since its last check", names)))
            rows_read = None
        assertions = tuple(
            lineage.Assertion(
                o.check.name,
                o.check.type,
                o.success,
                o.check.severity,
                o.check.kwargs.get("column"),
                o.found,
            )
            for o in checked.outcomes
        )
        return Done(
            verdict, rows_read=rows_read, failures=len(failed), message=names,
            assertions=assertions,
        )  # fmt: skip

    @cached_property
    def _checker(self) -> Any:
        from lakehouse.quality.checks import Checker

        # One lease on the check results for the whole walk: taking one per table costs
        # each check a round of S3 calls.
        results = store.results_table("check").name
        self._held.enter_context(lease.holding(self.settings, [results], "lakehouse check"))
        return Checker(self.spark, self.settings, load_suites(self.settings.quality.suites_dir))

    def __enter__(self) -> NodeRunner:
        return self

    def __exit__(self, *_: object) -> None:
        """Record the walk's model runs (also when one failed), then release what the walk
        held (the leases of the run log and the check results)."""
        with self._held:
            self._record_models()


_RUNS: dict[Kind, Callable[[NodeRunner, Any], Done]] = {
    "stream": NodeRunner._stream,
    "model": NodeRunner._model,
    "check": NodeRunner._check,
}
"""What running a node of each kind means, given what the node runs."""


def walk(
    settings: Settings,
    graph: Graph,
    nodes: list[Node],
    runner: NodeRunner,
    invocation: dict[str, Any],
) -> list[NodeResult]:
    """`runtime.walk.walk` of `nodes` as a command runs it: `invocation` (the command's
    arguments, with its name as `command`) in run_results.json, the manifest beside it,
    the lineage events of its nodes."""
    manifest_now = manifest(settings, graph)
    lineage = walk_lineage(runner.spark, settings, manifest_now, invocation["command"])
    return execute.walk(settings, graph, nodes, runner, invocation, manifest_now, lineage)


def plan(pipeline: Graph, nodes: Sequence[Node]) -> list[str]:
    """What a walk over `nodes` would run, one line per node, with what it waits for."""
    chosen = {n.name for n in nodes}
    lines = []
    for n in nodes:
        after = sorted(pipeline.parents[n.name] & chosen)
        waits = f" after {', '.join(after)}" if after else ""
        lines.append(f"{n.kind:<6} {n.name:<32}{waits}".rstrip())
    return lines
