"""`lakehouse build|ls`: the whole pipeline as one graph, dbt-style; `walk`, which `run`
and `check` use too."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from lakehouse.cli.context import invocation, settings_of, spark_for
from lakehouse.core.console import echo

if TYPE_CHECKING:
    pass

SELECTION_HELP = (
    "nodes as dbt selects them: a name (silver, gold.sensor_hourly or sensor_hourly, "
    "check:silver.sessions, or a table: its writer), name+ / +name with everything "
    "downstream / upstream, 2+name / name+1 at most that many steps, layer:gold, "
    "type:stream|model|check; words unite, commas intersect (layer:gold,type:check)"
)


def add_commands(commands: Any) -> None:
    build = commands.add_parser(
        "build",
        help="run and check the pipeline in dependency order, in one Spark application",
        description="Run every selected node in dependency order: the bronze and silver "
        "streams to the end of their input (availableNow), each gold model incrementally, "
        "and each table's suite over the whole table right after the node that writes it. "
        "A node that fails (an error, or a check whose `fail` expectation failed) skips "
        "everything downstream of it; independent branches go on. Writes run_results.json "
        "and manifest.json under the state folder. Exits 1 if any node failed.",
    )
    add_selection(build)
    build.add_argument(
        "--full-refresh",
        action="store_true",
        help="rebuild the selected gold models from their inputs instead of incrementally; "
        "build never rebuilds a stream (that is `run bronze|silver --full-refresh`)",
    )
    build.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    build.set_defaults(handler=run_build, command="build")

    ls = commands.add_parser(
        "ls",
        help="list the pipeline's nodes (or a selection) in the order build runs them",
        description="Print each selected node: its kind, name and the selected nodes it "
        "runs after. Starts no Spark.",
    )
    add_selection(ls)
    ls.set_defaults(handler=run_ls, command="ls")


def add_selection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--select", "-s", nargs="+", default=[], metavar="SELECTOR", help=SELECTION_HELP
    )
    parser.add_argument(
        "--exclude", nargs="+", default=[], metavar="SELECTOR", help="nodes to leave out"
    )


def run_ls(args: argparse.Namespace) -> None:
    from lakehouse import definitions as pipeline
    from lakehouse.graph.nodes import select

    graph = pipeline.graph(settings_of(args))
    for line in pipeline.plan(graph, select(graph, args.select, args.exclude)):
        echo(line)


def run_build(args: argparse.Namespace) -> int:
    from lakehouse import definitions as pipeline
    from lakehouse.graph.nodes import select
    from lakehouse.observe import metrics
    from lakehouse.runtime.walk import tally

    settings = settings_of(args)
    graph = pipeline.graph(settings)
    chosen = select(graph, args.select, args.exclude)
    if args.select:  # a selected node's checks come with it, as dbt's tests do
        excluded = {n.name for n in select(graph, args.exclude)} if args.exclude else set()
        names = {n.name for n in chosen}
        names |= set(graph.checks_of(names)) - excluded
        chosen = [n for n in graph.nodes if n.name in names]
    if args.dry_run:
        echo(f"build would run {len(chosen)} nodes:")
        for line in pipeline.plan(graph, chosen):
            echo(f"  {line}")
        return 0
    settings, spark = spark_for(args, "build", validates=True)
    metrics.serve(settings.metrics, "build")
    runner = pipeline.NodeRunner(spark, settings, models_in_full=args.full_refresh)
    results = pipeline.walk(settings, graph, chosen, runner, invocation(args))
    echo(f"build: {tally(results)}")
    for r in results:  # what needs a look, once more at the end, as dbt lists it
        if r.status in ("error", "warn"):
            echo(f"  {r.status.upper():<5} {r.unique_id}: {r.message}")
    return 1 if any(r.status == "error" for r in results) else 0
