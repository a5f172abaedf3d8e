"""`lakehouse check|report`: whole tables against their suites, and the Data Docs."""

from __future__ import annotations

import argparse
from typing import Any

from lakehouse.cli.context import invocation, spark_for
from lakehouse.core.console import echo
from lakehouse.storage.catalog import LAYERS


def add_commands(commands: Any) -> None:
    check = commands.add_parser(
        "check",
        help="validate whole tables against their expectation suites",
        description="Run the suites in expectations/ over the tables as they are now, record "
        "the results in quality.expectation_results and keep them for the Data Docs. Exits 1 "
        "when an expectation of severity `fail` fails.",
    )
    check.add_argument(
        "select", nargs="?", help="a layer (silver) or a table (silver.sessions); default: all"
    )
    check.add_argument(
        "--since",
        metavar="TIMESTAMP",
        help="only rows at or after this time (UTC), by each suite's time_column",
    )
    check.set_defaults(handler=run_check, command="check")

    report = commands.add_parser(
        "report",
        help="build the Data Docs site and summarise data quality",
        description="Render the Great Expectations Data Docs from the latest checks, with a "
        "page of the tables and a page of plots of the recorded progress over time; print "
        "their paths and a summary: each table's latest check, in-stream validation totals, "
        "the worst failures.",
    )
    report.add_argument(
        "--publish",
        metavar="s3://BUCKET/PREFIX",
        help="also upload the site there (endpoint and keys from the s3 settings)",
    )
    report.set_defaults(handler=run_report)


def run_check(args: argparse.Namespace) -> int:
    from lakehouse import definitions as pipeline
    from lakehouse.graph.nodes import check_name, select

    settings, spark = spark_for(args, "check", validates=True)
    graph = pipeline.graph(settings)
    chosen = args.select
    selector = f"layer:{chosen},type:check" if chosen in LAYERS else check_name(chosen or "")
    nodes = select(graph, [selector] if chosen else ["type:check"])
    echo(f"checking {chosen or 'every table'} against {settings.quality.suites_dir}")
    runner = pipeline.NodeRunner(spark, settings, since=args.since)
    results = [
        r
        for r in pipeline.walk(settings, graph, nodes, runner, invocation(args))
        if r.status != "skipped"
    ]
    blocking = [r.unique_id.removeprefix("check:") for r in results if r.status == "error"]
    warned = [r for r in results if r.status == "warn"]
    echo(
        f"{len(results)} tables checked: {len(results) - len(blocking) - len(warned)} passed, "
        f"{len(warned)} with warnings, {len(blocking)} failed"
        + (f" ({', '.join(blocking)})" if blocking else "")
    )
    return 1 if blocking else 0


def run_report(args: argparse.Namespace) -> None:
    from lakehouse import definitions as pipeline
    from lakehouse.report.checks import build_data_docs, latest_checks, summary
    from lakehouse.report.plots_page import write_plots_page
    from lakehouse.report.tables_page import write_tables_page

    settings, spark = spark_for(args, "report", validates=True)
    index = build_data_docs(settings)
    manifest = pipeline.manifest(settings, pipeline.graph(settings))
    tables = write_tables_page(index.parent, manifest, latest_checks(spark, settings))
    plots = write_plots_page(
        index.parent, spark, settings, pipeline.KAFKA_RECORDS, pipeline.LINEAGE_TABLES
    )
    for line in summary(spark, settings):
        echo(line)
    echo(f"Data Docs: {index}")
    echo(f"tables, columns and the pipeline graph: {tables}")
    echo(f"progress over time (rates, Kafka lag, durations, freshness): {plots}")
    if args.publish:
        from lakehouse.report.publish import publish_site
        from lakehouse.services import s3

        published = publish_site(index.parent, args.publish, s3.client(settings))
        echo(
            f"published {published.files} files ({published.bytes:,} bytes): {published.index_url}"
        )
