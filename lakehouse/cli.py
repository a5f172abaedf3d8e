"""`lakehouse`: the command line of the project. Each subcommand is a thin entry point."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from lakehouse.errors import LakehouseError, SettingsError
from lakehouse.settings import Settings, load_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DESCRIPTION = """\
Layered Kafka -> Delta lakehouse for ordered, stateful sensor streams.

Settings come from conf/base.yaml and conf/<target>.yaml; an environment variable
LAKEHOUSE__<SECTION>__<KEY> overrides one key (e.g. LAKEHOUSE__KAFKA__BOOTSTRAP_SERVERS).
"""


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except SettingsError as error:
        print(f"lakehouse: settings error: {error}", file=sys.stderr)
        return 2
    except LakehouseError as error:
        print(f"lakehouse: error: {error}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lakehouse", description=DESCRIPTION, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--target", help="settings target: conf/<target>.yaml (default: $LAKEHOUSE_TARGET or local)"
    )
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)

    setup = commands.add_parser(
        "setup",
        help="resolve the pinned JVM jars and Data Docs assets (make setup runs it)",
    )
    setup.add_argument("--force", action="store_true", help="resolve again even if unchanged")
    setup.set_defaults(handler=_setup)

    kafka = commands.add_parser("kafka", help="the embedded Kafka broker (KRaft) on 127.0.0.1")
    kafka.add_argument("action", choices=("start", "stop", "status"))
    kafka.set_defaults(handler=_kafka)

    catalog = commands.add_parser(
        "catalog",
        help="the embedded metastore on 127.0.0.1 that names every table (bronze.*, gold.*, ...)",
        description="start|stop|status: the embedded metastore (a Derby network server) that "
        "every job, `lakehouse sql` and the SQL server share. register: name every Delta "
        "table under the storage root in the catalog (jobs register their own tables).",
    )
    catalog.add_argument("action", choices=("start", "stop", "status", "register"))
    catalog.set_defaults(handler=_catalog)

    s3 = commands.add_parser(
        "s3", help="the embedded S3 server (SeaweedFS) on 127.0.0.1, for reports and tests"
    )
    s3.add_argument("action", choices=("start", "stop", "status"))
    s3.add_argument(
        "--bucket", action="append", default=[], help="start: create this bucket (repeatable)"
    )
    s3.set_defaults(handler=_s3)

    produce = commands.add_parser(
        "produce",
        help="send deterministic sensor traffic, with faults on request",
        description="Send snapshot/update/end sessions (docs/protocol.md) to one topic per "
        "sensor and print what was sent.",
    )
    produce.add_argument("--seed", type=int, default=7)
    produce.add_argument("--sensors", type=int, default=3, help="topics, one per sensor")
    produce.add_argument("--first-sensor", type=int, default=1, help="number of the first sensor")
    produce.add_argument("--sessions", type=int, default=4, help="sessions per sensor, overlapping")
    produce.add_argument("--rows", type=int, default=200, help="rows in each snapshot")
    produce.add_argument("--updates", type=int, default=100, help="updates per session")
    produce.add_argument(
        "--resync-every", type=int, default=0, help="fresh snapshot every N updates"
    )
    produce.add_argument(
        "--rate", default="max", help="records per second, or `max` (default) for no limit"
    )
    produce.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="KIND=N",
        help="inject N faults of a kind: gap, duplicate, reorder, malformed_json, "
        "missing_field, wrong_type, oversize, null_key (repeatable)",
    )
    produce.add_argument("--json", action="store_true", help="print the report as JSON")
    produce.set_defaults(handler=_produce)

    run = commands.add_parser(
        "run",
        help="run a layer's job",
        description="bronze and silver are streams: they process what is there now and stop, "
        "or keep running with --continuous. gold runs its models (gold/*.py) in dependency "
        "order, each incrementally: only the keys that silver changes since the model's last "
        "run touch are recomputed.",
    )
    run.add_argument("layer", choices=("bronze", "silver", "gold"))
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
        help="silver: write every state transition of these sessions (all when no list is "
        "given) to silver.state_transitions",
    )
    run.add_argument(
        "--select",
        nargs="+",
        default=[],
        metavar="MODEL",
        help="gold: only these models; `name+` adds what is downstream of it, `+name` what is "
        "upstream (e.g. --select sensor_hourly+)",
    )
    run.add_argument(
        "--full-refresh",
        action="store_true",
        help="gold: rebuild the selected models from their inputs instead of incrementally",
    )
    run.set_defaults(handler=_run)

    compact = commands.add_parser(
        "compact",
        help="OPTIMIZE (bin-packing, clustering) and VACUUM the tables",
        description="Bin-pack the small files streams and incremental runs leave (gold tables "
        "are also clustered on their query keys), then VACUUM files older than the retention. "
        "The retention is checked against the lag of every incremental reader (the silver "
        "stream on bronze, gold models on their inputs) and refused if one would lose data. "
        "Safe while the streams run. Prints files and bytes before and after per table.",
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
    compact.set_defaults(handler=_compact)

    sql = commands.add_parser(
        "sql",
        help="query the tables by name (bronze.*, silver.*, gold.*), read-only",
        description="Run SQL on the shared catalog and print the result. Delta time travel "
        "works: SELECT * FROM gold.sensor_hourly VERSION AS OF 3. Statements that change data "
        "or the catalog (DDL, DML, OPTIMIZE, ...) are refused unless --allow-writes is given.",
    )
    sql.add_argument("statement", nargs="?", help="one or more statements separated by ;")
    sql.add_argument("-f", "--file", help="read the statements from this file")
    sql.add_argument(
        "--format",
        choices=("table", "csv", "json"),
        default="table",
        help="table (default), csv with a header, or json (one object per line)",
    )
    sql.add_argument(
        "--max-rows", type=int, default=1000, help="table format: show at most this many rows"
    )
    sql.add_argument("--allow-writes", action="store_true", help="permit DDL and DML")
    sql.set_defaults(handler=_sql)

    sql_server = commands.add_parser(
        "sql-server",
        help="Spark's Thrift JDBC/ODBC server on 127.0.0.1 for BI tools and beeline, read-only",
        description="Serve the shared catalog over JDBC/ODBC (HiveServer2 protocol) until "
        "Ctrl-C, e.g. beeline -u jdbc:hive2://127.0.0.1:10000/gold. Read-only unless "
        "--allow-writes is given; no client setting can switch that off.",
    )
    sql_server.add_argument("--port", type=int, default=10000, help="default: 10000")
    sql_server.add_argument("--allow-writes", action="store_true", help="permit DDL and DML")
    sql_server.set_defaults(handler=_sql_server)

    inspect = commands.add_parser(
        "inspect",
        help="show the live session state in silver's checkpoint",
        description="Read silver's state store through Spark's state data source: one line "
        "per live session (status, last seq, rows, records, state size).",
    )
    inspect.add_argument("--session", action="append", default=[], help="only these sessions")
    inspect.add_argument("--limit", type=int, default=50, help="at most this many lines")
    inspect.set_defaults(handler=_inspect)

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
    check.set_defaults(handler=_check)

    report = commands.add_parser(
        "report",
        help="build the Data Docs site and summarise data quality",
        description="Render the Great Expectations Data Docs from the latest checks, print "
        "the path of its index and a summary: each table's latest check, in-stream "
        "validation totals, the worst failures.",
    )
    report.add_argument(
        "--publish",
        metavar="s3://BUCKET/PREFIX",
        help="also upload the site there (endpoint and keys from the s3 settings)",
    )
    report.set_defaults(handler=_report)
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(args.target)


def _setup(args: argparse.Namespace) -> None:
    from lakehouse import data_docs, jars, metastore

    jars.resolve(force=args.force)
    jars.build_sql_extension(force=args.force)
    print(f"JVM jars ready in {jars.JARS_DIR}")
    print(f"metastore schema ready in {metastore.create_template(force=args.force)}")
    print(f"Data Docs scripts and styles ready in {data_docs.fetch_assets(force=args.force)}")


def _kafka(args: argparse.Namespace) -> int:
    from lakehouse.kafka_broker import EmbeddedKafka

    broker = EmbeddedKafka.under(_settings(args).storage.local_state_dir)
    if args.action == "start":
        print(f"Kafka broker ready at {broker.start()} (log: {broker.log_file})")
    elif args.action == "stop":
        print("Kafka broker stopped" if broker.stop() else "Kafka broker was not running")
    else:
        address = broker.bootstrap()
        print(f"running at {address}" if address else "not running")
        return 0 if address else 3
    return 0


def _catalog(args: argparse.Namespace) -> int:
    from lakehouse.metastore import EmbeddedMetastore

    settings = _settings(args)
    if args.action == "register":
        from lakehouse.catalog import register_lake
        from lakehouse.spark import build_spark

        spark = build_spark(settings, app_name="lakehouse-catalog")
        names = register_lake(spark, settings.storage.root)
        print(f"{len(names)} tables registered: {', '.join(names) or 'none yet'}")
        return 0
    server = EmbeddedMetastore.under(settings.storage.local_state_dir)
    if args.action == "start":
        print(f"metastore ready at {server.start()} (log: {server.log_file})")
    elif args.action == "stop":
        print("metastore stopped" if server.stop() else "metastore was not running")
    else:
        url = server.url()
        print(f"running at {url}" if url else "not running")
        return 0 if url else 3
    return 0


def _s3(args: argparse.Namespace) -> int:
    from lakehouse.s3_server import EmbeddedS3

    settings = _settings(args)
    server = EmbeddedS3.under(
        settings.storage.local_state_dir, settings.s3.access_key, settings.s3.secret_key
    )
    if args.action == "start":
        print(f"S3 server ready at {server.start(tuple(args.bucket))} (log: {server.log_file})")
    elif args.action == "stop":
        print("S3 server stopped" if server.stop() else "S3 server was not running")
    else:
        running = server.endpoint()
        print(f"running at {running}" if running else "not running")
        return 0 if running else 3
    return 0


def _produce(args: argparse.Namespace) -> None:
    from lakehouse.kafka_source import check_reachable, resolve_bootstrap
    from lakehouse.producer import TrafficSpec, produce

    settings = _settings(args)
    faults: dict[str, int] = {}
    for item in args.fault:
        kind, _, count = item.partition("=")
        if not count.isdigit():
            raise LakehouseError(f"--fault {item!r}: expected KIND=N, e.g. gap=3")
        faults[kind] = faults.get(kind, 0) + int(count)
    spec = TrafficSpec(
        seed=args.seed,
        sensors=args.sensors,
        first_sensor=args.first_sensor,
        sessions_per_sensor=args.sessions,
        rows_per_snapshot=args.rows,
        updates_per_session=args.updates,
        resync_every=args.resync_every,
        faults=faults,
        topic_prefix=settings.kafka.topic_prefix,
        partitions=settings.kafka.partitions,
    )
    rate = None if args.rate == "max" else float(args.rate)
    bootstrap = resolve_bootstrap(settings)
    check_reachable(bootstrap)
    report = produce(spec, bootstrap, settings.kafka.options, rate, progress=not args.json)
    print(report.to_json() if args.json else report.to_text())


def _run(args: argparse.Namespace) -> None:
    from lakehouse.spark import build_spark

    settings = _settings(args)
    if args.layer != "gold" and (args.select or args.full_refresh):
        raise LakehouseError("--select and --full-refresh apply to `run gold` only")
    if args.layer == "gold" and (args.continuous or args.trace is not None):
        raise LakehouseError("gold is a batch job: --continuous and --trace do not apply")
    spark = build_spark(settings, app_name=f"lakehouse-{args.layer}")
    if args.layer == "bronze":
        _run_bronze(spark, settings, args)
    elif args.layer == "silver":
        _run_silver(spark, settings, args)
    else:
        _run_gold(spark, settings, args)


def _run_bronze(spark: SparkSession, settings: Settings, args: argparse.Namespace) -> None:
    from bronze import sensor_records
    from lakehouse.quality import quarantine_counts

    stats = sensor_records.run(spark, settings, continuous=args.continuous)
    by_topic = sensor_records.rows_by_topic(spark, settings)
    print(
        f"{sensor_records.NAME}: {sum(by_topic.values()):,} records in {len(by_topic)} topics "
        f"(+{stats.input_rows:,} in {stats.batches} batches, {stats.seconds:.1f}s)"
    )
    for topic, count in by_topic.items():
        print(f"  {topic:<32} {count:>12,}")
    quarantined = quarantine_counts(spark, settings.storage.root, sensor_records.NAME)
    if quarantined:
        print(f"  quarantined by its suite (bronze.quarantine): {_pairs(quarantined)}")


def _run_silver(spark: SparkSession, settings: Settings, args: argparse.Namespace) -> None:
    from silver import reconstruct

    trace = None if args.trace is None else frozenset(filter(None, args.trace.split(",")))
    stats = reconstruct.run(spark, settings, continuous=args.continuous, trace=trace)
    by_status, by_reason = reconstruct.counts(spark, settings)
    print(
        f"silver: +{stats.input_rows:,} bronze records in {stats.batches} batches "
        f"({stats.seconds:.1f}s)"
    )
    print(f"  sessions by status:   {_pairs(by_status)}")
    print(f"  violations by reason: {_pairs(by_reason) or 'none'}")


def _run_gold(spark: SparkSession, settings: Settings, args: argparse.Namespace) -> None:
    from gold.models import MODELS
    from lakehouse.models import run_models, select

    models = select(MODELS, args.select)
    runs = run_models(spark, settings.storage, models, full_refresh=args.full_refresh)
    modes = {m: sum(r.mode == m for r in runs) for m in ("full", "incremental", "unchanged")}
    print(f"gold: {len(runs)} models ({_pairs({k: v for k, v in modes.items() if v})}), "
          f"{sum(r.seconds for r in runs):.1f}s")  # fmt: skip


def _compact(args: argparse.Namespace) -> None:
    from lakehouse.compaction import compact
    from lakehouse.spark import build_spark

    settings = _settings(args)
    spark = build_spark(settings, app_name="lakehouse-compact")
    results = compact(spark, settings, args.tables, args.retention_hours, not args.no_vacuum)
    before = sum(r.snapshot_before.files for r in results)
    after = sum(r.snapshot_after.files for r in results)
    print(f"compacted {len(results)} tables: {before:,} files -> {after:,}")


def _sql(args: argparse.Namespace) -> None:
    from lakehouse import sql
    from lakehouse.spark import build_spark

    if bool(args.statement) == bool(args.file):
        raise LakehouseError("give either a statement or -f FILE")
    text = args.statement or _read_text(Path(args.file))
    statements = sql.split_statements(text)
    if not statements:
        raise LakehouseError("no SQL statement given")
    settings = _settings(args)
    conf = sql.session_conf(args.allow_writes)
    spark = build_spark(settings, app_name="lakehouse-sql", extra=conf)
    sql.run_statements(spark, statements, args.format, args.max_rows)


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as error:
        raise LakehouseError(f"cannot read {path}: {error.strerror}") from None


def _sql_server(args: argparse.Namespace) -> None:
    import signal
    import threading

    from lakehouse import services, sql
    from lakehouse.spark import build_spark

    if not services.free(args.port):
        raise LakehouseError(f"port {args.port} on 127.0.0.1 is taken; choose another with --port")
    settings = _settings(args)
    spark = build_spark(settings, app_name="lakehouse-sql-server",
                        extra=sql.session_conf(args.allow_writes, args.port))  # fmt: skip
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    mode = "read-write" if args.allow_writes else "read-only"
    print(f"SQL server ({mode}) on jdbc:hive2://127.0.0.1:{args.port}/default; Ctrl-C stops it",
          flush=True)  # fmt: skip
    sql.serve(spark, stop)
    print("SQL server stopped")


def _inspect(args: argparse.Namespace) -> None:
    from pyspark.sql import functions as F

    from lakehouse.spark import build_spark
    from silver import reconstruct

    settings = _settings(args)
    spark = build_spark(settings, app_name="lakehouse-inspect")
    try:
        state = reconstruct.live_state(spark, settings)
        if args.session:
            state = state.where(F.col("session_id").isin(args.session))
        rows = state.orderBy("session_id").limit(args.limit).collect()
        total = state.count()
    except Exception as error:  # Spark's reader says "no state" in a long Java trace
        from lakehouse.streaming import explain

        raise LakehouseError(f"cannot read silver state: {explain(error)}") from None
    print(f"{total:,} live sessions in silver state" + (f" (first {len(rows)})" if rows else ""))
    for r in rows:
        print(f"  {r.session_id:<36} {r.status:<8} last_seq={r.last_seq} rows={r.table_rows} "
              f"records={r.records} state={r.state_bytes:,}B")  # fmt: skip


def _check(args: argparse.Namespace) -> int:
    from lakehouse.checks import check_tables
    from lakehouse.spark import build_spark

    settings = _settings(args)
    spark = build_spark(settings, app_name="lakehouse-check")
    print(f"checking {args.select or 'every table'} against {settings.quality.suites_dir}")
    checks = check_tables(spark, settings, args.select, args.since)
    blocking = [c.suite.table for c in checks if c.blocking]
    warned = [c.suite.table for c in checks if c.failed and not c.blocking]
    print(
        f"{len(checks)} tables checked: {len(checks) - len(blocking) - len(warned)} passed, "
        f"{len(warned)} with warnings, {len(blocking)} failed"
        + (f" ({', '.join(blocking)})" if blocking else "")
    )
    return 1 if blocking else 0


def _report(args: argparse.Namespace) -> None:
    from lakehouse.checks import build_data_docs, summary
    from lakehouse.spark import build_spark

    settings = _settings(args)
    spark = build_spark(settings, app_name="lakehouse-report")
    index = build_data_docs(settings)
    for line in summary(spark, settings):
        print(line)
    print(f"Data Docs: {index}")
    if args.publish:
        from lakehouse import s3_client
        from lakehouse.publish import publish_site

        published = publish_site(index.parent, args.publish, s3_client.client(settings))
        print(
            f"published {published.files} files ({published.bytes:,} bytes): {published.index_url}"
        )


def _pairs(counts: dict[str, int]) -> str:
    return ", ".join(f"{key}={value:,}" for key, value in counts.items())


if __name__ == "__main__":
    sys.exit(main())
