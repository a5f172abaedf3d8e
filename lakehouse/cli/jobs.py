"""`lakehouse run|status|inspect|compact`: the layers' jobs, how they keep up, silver's live
state, compaction."""

from __future__ import annotations

import argparse
from typing import Any

from lakehouse.cli.context import invocation, spark_for
from lakehouse.core.console import echo
from lakehouse.core.errors import LakehouseError, explain


def add_commands(commands: Any) -> None:
    _add_run(commands)
    _add_status(commands)
    _add_inspect(commands)
    _add_compact(commands)


def _add_run(commands: Any) -> None:
    run = commands.add_parser(
        "run",
        help="run a layer's job, or the whole pipeline (all)",
        description="bronze and silver are streams: they process what is there now and stop, "
        "or keep running with --continuous; every compact.stream_every_batches batches they "
        "compact the tables they write. gold runs its models (gold/*.py) in dependency "
        "order, each incrementally: only the keys that silver changes since the model's last "
        "run touch are recomputed, and judged by its suite (expectations/gold/) before they "
        "are written. `all` runs the three in one Spark application; with --continuous, the "
        "two streams side by side and gold every gold.every_seconds, each part restarted "
        "after a transient failure (a broker or object storage that did not answer) within "
        "the budget of `supervision` in conf, and every part stopped after its running batch "
        "by Ctrl-C, SIGTERM or a lasting failure of one. Writes run_results.json under the "
        "state folder. To run and check the whole pipeline once: `lakehouse build`.",
    )
    run.add_argument("layer", choices=("bronze", "silver", "gold", "all"))
    run.add_argument(
        "--continuous",
        action="store_true",
        help="keep running on the configured trigger until Ctrl-C (default: ingest what is "
        "there now, then stop)",
    )
    run.add_argument(
        "--trace",
        nargs="?",
        const="",
        metavar="SESSION[,SESSION...]",
        help="silver: write every state transition of these sessions, each `session_id` or "
        "`sensor/session_id` (all when no list is given), to silver.state_transitions",
    )
    run.add_argument(
        "--select",
        nargs="+",
        default=[],
        metavar="MODEL",
        help="gold: only these models, selected as `build --select` selects (`name+` adds "
        "what is downstream of it, `+name` what is upstream, e.g. sensor_hourly+; see "
        "`lakehouse ls --help`)",
    )
    run.add_argument(
        "--full-refresh",
        action="store_true",
        help="bronze: ingest again from Kafka's earliest offsets on a new checkpoint, its "
        "first batch replacing the table (refused if Kafka no longer holds every record "
        "bronze does); silver then rebuilds itself. silver: rebuild from all of bronze on a "
        "new checkpoint, its first batch replacing silver's tables (after a state version "
        "change or a lost checkpoint); gold then refreshes in full by itself. gold: rebuild "
        "the selected models from their inputs instead of incrementally",
    )
    run.set_defaults(handler=run_layer, command="run")


def _add_status(commands: Any) -> None:
    status = commands.add_parser(
        "status",
        help="is the pipeline keeping up, is its data fresh? (exit 0 ok, 1 warn, 2 error)",
        description="Read from storage and the broker, so it answers whether the streams run "
        "or not: each stream's last batch (when, rows, rates, duration, state size) from "
        "ops.progress; Kafka lag per topic, in records and in how long the oldest unread "
        "record waited (the broker's end offsets minus the offsets in bronze's checkpoint), "
        "with the partitions that lag; a stream stalled, with input waiting and no batch for "
        "too long; how far silver is behind bronze and each gold model behind its inputs, in "
        "versions and rows; and each table's freshness, its newest Kafka timestamp or event "
        "time against the clock. Each is judged by its rule in conf (status.kafka_lag, "
        "status.stalled, status.freshness). Exits 0 when all is well, 1 on a warning, 2 on an "
        "error (a rule's error bound passed, a missing table, an unreachable broker), for "
        "cron and alerting.",
    )
    status.add_argument("--json", action="store_true", help="print one JSON document instead")
    status.add_argument(
        "--partitions",
        action="store_true",
        help="list every Kafka partition under its topic, not only those bronze is behind on",
    )
    status.set_defaults(handler=run_status)


def _add_inspect(commands: Any) -> None:
    inspect = commands.add_parser(
        "inspect",
        help="show the live session state in silver's checkpoint",
        description="Read silver's state store through Spark's state data source: one line "
        "per live session (status, last seq, rows, records, state size).",
    )
    inspect.add_argument("--session", action="append", default=[], help="only these sessions")
    inspect.add_argument("--limit", type=int, default=50, help="at most this many lines")
    inspect.set_defaults(handler=run_inspect)


def _add_compact(commands: Any) -> None:
    compact = commands.add_parser(
        "compact",
        help="OPTIMIZE (bin-packing, clustering) and VACUUM the tables",
        description="Bin-pack the small files streams and incremental runs leave (gold tables "
        "are also clustered on their query keys), then VACUUM files older than the retention. "
        "The retention is checked against the lag of every incremental reader (the silver "
        "stream on bronze, gold models on their inputs) and refused if one would lose data. "
        "Streams also compact the tables they write themselves, every "
        "compact.stream_every_batches batches. On local disk this command is safe beside "
        "them; on S3 a running stream holds its tables' leases, so name the others. Prints "
        "files and bytes before and after per table.",
    )
    compact.add_argument(
        "tables", nargs="*", metavar="TABLE", help="e.g. silver.row_changes (default: all)"
    )
    compact.add_argument(
        "--retention-hours",
        type=float,
        help="VACUUM retention (default: compact.vacuum_retention_hours)",
    )
    compact.add_argument("--no-vacuum", action="store_true", help="only OPTIMIZE")
    compact.set_defaults(handler=run_compact)


def run_layer(args: argparse.Namespace) -> None:
    from lakehouse.observe import metrics
    from lakehouse.ops.run import LayerRun, run

    if args.layer not in ("gold", "all") and args.select:
        raise LakehouseError("--select applies to `run gold` and `run all` only")
    if args.layer == "gold" and (args.continuous or args.trace is not None):
        raise LakehouseError("gold is a batch job: --continuous and --trace do not apply")
    if args.layer == "bronze" and args.trace is not None:
        raise LakehouseError("--trace applies to `run silver` and `run all` only")
    if args.layer == "all" and args.full_refresh:
        raise LakehouseError("--full-refresh applies to one layer: `run bronze --full-refresh`")
    trace = None if args.trace is None else frozenset(filter(None, args.trace.split(",")))
    asked = LayerRun(
        args.layer,
        invocation(args),
        select=tuple(args.select),
        continuous=args.continuous,
        full_refresh=args.full_refresh,
        trace=trace,
    )
    settings, spark = spark_for(args, args.layer, validates=True)
    metrics.serve(settings.metrics, args.layer)
    run(spark, settings, asked)


def run_status(args: argparse.Namespace) -> int:
    import json

    from lakehouse.ops.status import lines, status

    settings, spark = spark_for(args, "status")
    try:
        found = status(spark, settings)
    except Exception as error:  # not knowing is an error to whoever alerts on the exit code
        echo(f"lakehouse: error: status unknown: {explain(error)}", err=True)
        return 2
    if args.json:
        echo(json.dumps(found.as_json(), indent=2))
    else:
        for line in lines(found, args.partitions):
            echo(line)
    return found.exit_code


def run_inspect(args: argparse.Namespace) -> None:
    from lakehouse.ops.inspect import live_sessions

    settings, spark = spark_for(args, "inspect")
    for line in live_sessions(spark, settings, args.session, args.limit):
        echo(line)


def run_compact(args: argparse.Namespace) -> None:
    from lakehouse import definitions as pipeline
    from lakehouse.storage.compaction import compact
    from lakehouse.storage.lease import LeaseRefused

    settings, spark = spark_for(args, "compact")
    try:
        results = compact(
            spark, settings, pipeline.READERS, args.tables, args.retention_hours, not args.no_vacuum
        )
    except LeaseRefused as refused:
        if refused.table not in pipeline.STREAM_TABLES:
            raise
        raise LeaseRefused(
            f"{refused}. A running stream compacts the tables it writes itself (every "
            "compact.stream_every_batches batches); name the tables to compact the others",
            refused.table,
        ) from None
    before = sum(r.snapshot_before.files for r in results)
    after = sum(r.snapshot_after.files for r in results)
    echo(f"compacted {len(results)} tables: {before:,} files -> {after:,}")
