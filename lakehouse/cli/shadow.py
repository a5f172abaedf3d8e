"""`lakehouse shadow start|run|status|compare|swap|drop`: change the code of a running
pipeline safely, by building a layer again beside the live one."""

from __future__ import annotations

import argparse
import json
from typing import Any

from lakehouse.cli.context import invocation, settings_of, spark_for
from lakehouse.core.console import echo

DESCRIPTION = """\
Build silver (and gold after it), or gold, again beside the live version, with the code and
settings of this checkout, while the live pipeline keeps running its own; compare the two
on the same input; then swap the names over, and back if need be. docs/operations.md,
"Changing the code of a running pipeline".

  lakehouse shadow start silver       declare the shadow (silver and gold, tagged v2, ...)
  lakehouse shadow run --continuous   build it from all of bronze, then follow bronze
  lakehouse shadow status             how far behind the live version it is, its checks
  lakehouse shadow compare            what it answers differently, table by table
  lakehouse shadow swap               make it live; the old version stops after its batch
  lakehouse shadow swap --back        make the old version live again
  lakehouse shadow drop               delete the version beside the live one
"""


def add_commands(commands: Any) -> None:
    group = commands.add_parser(
        "shadow",
        help="rebuild a layer beside the live one, compare, swap (and back)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = group.add_subparsers(title="steps", metavar="STEP", required=True)
    _add_start_and_run(verbs)
    _add_status_and_compare(verbs)
    _add_swap_and_drop(verbs)


def _add_start_and_run(verbs: Any) -> None:
    start = verbs.add_parser(
        "start",
        help="declare a shadow of silver (and gold after it), or of gold",
        description="Declare a new version of what SELECTION names and everything downstream "
        "of it: `silver` (silver and gold), `gold`, or gold models selected as `run gold "
        "--select` does (gold as a whole: its models share one run log). Its tables and "
        "checkpoints are new folders beside the live ones (`<table>__v2`); nothing is built "
        "until `lakehouse shadow run`.",
    )
    start.add_argument("selection", metavar="SELECTION")
    start.set_defaults(handler=run_start)
    run = verbs.add_parser(
        "run",
        help="build the shadow from all of bronze (and follow bronze with --continuous)",
        description="The shadow's `run all`: its silver stream from bronze's first version on a "
        "checkpoint of its own, and its gold models, with this checkout's code and settings. "
        "Without --continuous it stops at bronze's current end; with it, it follows bronze "
        "until stopped, and goes on as the live pipeline's silver and gold after a swap.",
    )
    run.add_argument("--continuous", action="store_true", help="follow bronze until stopped")
    run.set_defaults(handler=run_run, command="shadow run")


def _add_status_and_compare(verbs: Any) -> None:
    status = verbs.add_parser(
        "status",
        help="how far the shadow is behind the live version, and its checks",
        description="Bronze versions, records and seconds between what the live silver and "
        "the shadow's have read; how many input versions each gold model has not read; "
        "failed validations of each version's quality gates; each name in the catalog that "
        "does not point where the lake's versions say (a swap not finished), which makes "
        "the exit 1.",
    )
    status.add_argument("--json", action="store_true", help="print one JSON document")
    status.set_defaults(handler=run_status)
    compare = verbs.add_parser(
        "compare",
        help="rows only in live, only in the shadow, and changed, table by table",
        description="Each of silver's sessions, session rows and violations and each gold "
        "model, by its key, at the same input on both sides: rows only in live, only in the "
        "shadow, changed (with the columns that differ), a sample of each; the checks side by "
        "side. Compares only versions that read the same bronze and whose gold read all of "
        "its inputs, and says so otherwise (exit 2): never a difference that is only lag. "
        "Exit 0: equal; 1: they differ. Also a page of the report site (shadow.html).",
    )
    compare.add_argument("--json", action="store_true", help="print one JSON document")
    compare.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait this long for both versions to have read the same input (default: 0)",
    )
    compare.set_defaults(handler=run_compare)


def _add_swap_and_drop(verbs: Any) -> None:
    swap = verbs.add_parser(
        "swap",
        help="make the shadow live; --back makes the old version live again",
        description="Make the shadow the live version: the lake's versions first, so that the "
        "old version's streams and gold stop after their batch (bronze goes on); once they "
        "have let go of their tables, every name in the catalog (silver.sessions, gold.*) "
        "points at the new version's table, each in one change that readers see at once. "
        "Refused while the shadow lacks a table the live version has. Killed at any step, "
        "it is finished by running it again; `shadow status` names what is left. The "
        "shadow's `shadow run --continuous` goes on as the live one. The old version is kept, "
        "named `<table>__<tag>`, for `swap --back` until `drop`. --back makes it live again; "
        "restart `lakehouse run all` to bring it up to date from its own checkpoint.",
    )
    swap.add_argument("--back", action="store_true", help="make the old version live again")
    swap.add_argument(
        "--wait",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="how long to wait for the old version's writers to stop (default: 300)",
    )
    swap.set_defaults(handler=run_swap)
    drop = verbs.add_parser(
        "drop",
        help="delete the version beside the live one",
        description="Delete the shadow (abandoned) or the old version (after a swap): its "
        "tables, checkpoint and names. Refused while a writer of it runs, and while a name "
        "in the catalog points at one of its tables.",
    )
    drop.set_defaults(handler=run_drop)


def run_start(args: argparse.Namespace) -> None:
    from lakehouse.ops import shadow

    shadow.start(settings_of(args), args.selection)


def run_run(args: argparse.Namespace) -> None:
    from lakehouse.observe import metrics
    from lakehouse.ops import shadow

    settings, spark = spark_for(args, "shadow", validates=True, shadow=True)
    metrics.serve(settings.metrics, "shadow")
    shadow.run_shadow(spark, settings, args.continuous, invocation(args))


def run_status(args: argparse.Namespace) -> int:
    """Exit 1 while a name disagrees with the versions."""
    from lakehouse.cli.shadow_text import where_lines
    from lakehouse.ops import shadow

    settings, spark = spark_for(args, "shadow-status")
    found = shadow.where(spark, settings)
    if args.json:
        echo(json.dumps(found.as_json(), indent=2))
    else:
        for line in where_lines(found):
            echo(line)
        for line in shadow.misnamed_lines(found.misnamed, shadow.finishing(found.versions)):
            echo(f"  {line}")
    return 1 if found.misnamed else 0


def run_compare(args: argparse.Namespace) -> int:
    from lakehouse.cli.shadow_text import comparison_lines
    from lakehouse.ops.shadow_compare import NotComparable, compare
    from lakehouse.report.shadow_page import write_shadow_page

    settings, spark = spark_for(args, "shadow-compare")
    try:
        found = compare(spark, settings, args.wait)
    except NotComparable as why:
        echo(f"lakehouse: the versions have not read the same input: {why}; compare later, or "
             "with --wait", err=True)  # fmt: skip
        return 2
    page = write_shadow_page(settings.quality.site_dir, found.as_json())
    if args.json:
        echo(json.dumps(found.as_json(), indent=2))
    else:
        for line in comparison_lines(found):
            echo(line)
        echo(f"report: {page}")
    return 0 if found.equal else 1


def run_swap(args: argparse.Namespace) -> None:
    from lakehouse.ops import shadow

    settings, spark = spark_for(args, "shadow-swap")
    shadow.swap(spark, settings, args.back, args.wait)


def run_drop(args: argparse.Namespace) -> None:
    from lakehouse.ops import shadow

    settings, spark = spark_for(args, "shadow-drop")
    shadow.drop(spark, settings)
