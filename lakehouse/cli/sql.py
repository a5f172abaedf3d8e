"""`lakehouse sql|sql-server`: the tables by name, read-only unless asked."""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path
from typing import Any

from lakehouse.cli.context import settings_of, spark_for
from lakehouse.core.console import echo
from lakehouse.core.errors import LakehouseError


def add_commands(commands: Any) -> None:
    from lakehouse.ops.sql import FORMATS

    sql = commands.add_parser(
        "sql",
        help="query the tables by name (bronze.*, silver.*, gold.*), read-only",
        description="Run SQL on the shared catalog and print the result. Delta time travel "
        "works: SELECT * FROM gold.sensor_hourly VERSION AS OF 3. Read-only unless "
        "--allow-writes is given: a statement runs only if its analyzed plan is a read of the "
        "lake's Delta tables by name (queries with built-in functions that compute on values, "
        "SHOW, DESCRIBE, EXPLAIN); anything else is refused in one line before it runs "
        "(docs/architecture.md, SQL).",
    )
    sql.add_argument("statement", nargs="?", help="one or more statements separated by ;")
    sql.add_argument("-f", "--file", help="read the statements from this file")
    sql.add_argument(
        "--format",
        choices=FORMATS,
        default="table",
        help="table (default), csv with a header, or json (one object per line)",
    )
    sql.add_argument(
        "--max-rows", type=int, default=1000, help="table format: show at most this many rows"
    )
    sql.add_argument(
        "--continue",
        dest="keep_going",
        action="store_true",
        help="run every statement even when one fails; each failure is one line on stderr, "
        "and the exit status is 1 if any failed",
    )
    sql.add_argument("--allow-writes", action="store_true", help="permit DDL and DML")
    sql.set_defaults(handler=run_sql)

    server = commands.add_parser(
        "sql-server",
        help="Spark's Thrift JDBC/ODBC server for BI tools and beeline, read-only",
        description="Serve the shared catalog over JDBC/ODBC (HiveServer2 protocol) until "
        "Ctrl-C, e.g. beeline -u jdbc:hive2://127.0.0.1:10000/gold. Read-only unless "
        "--allow-writes is given; no client setting can switch that off. It listens on "
        "sql.host (127.0.0.1 by default); beyond loopback only with sql.user set, and then "
        "admits that user alone, with the password in $LAKEHOUSE_SQL_PASSWORD, over TLS only "
        "(clients trust <local_state>/sql/tls/ca.pem or truststore.p12). A statement "
        "runs for sql.query_timeout_seconds at most, and its result may take "
        "sql.max_result_bytes.",
    )
    server.add_argument("--port", type=int, help="default: sql.port in conf (10000)")
    server.add_argument("--allow-writes", action="store_true", help="permit DDL and DML")
    server.set_defaults(handler=run_sql_server)


def run_sql(args: argparse.Namespace) -> None:
    from lakehouse.ops import sql

    if bool(args.statement) == bool(args.file):
        raise LakehouseError("give either a statement or -f FILE")
    text = args.statement or _read_text(Path(args.file))
    statements = sql.split_statements(text)
    if not statements:
        raise LakehouseError("no SQL statement given")
    settings = settings_of(args)
    _, spark = spark_for(args, "sql", sql.session_conf(args.allow_writes, settings.sql))
    sql.run_statements(spark, statements, args.format, args.max_rows, keep_going=args.keep_going)


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as error:
        raise LakehouseError(f"cannot read {path}: {error.strerror}") from None


def run_sql_server(args: argparse.Namespace) -> None:
    from lakehouse.ops import sql
    from lakehouse.services import process

    settings = settings_of(args)
    port = args.port or settings.sql.port
    tls = sql.server_tls(settings.sql, settings.storage.local_state_dir)
    conf = sql.session_conf(args.allow_writes, settings.sql, port, tls)  # refuses an open server
    if not process.free(port):
        raise LakehouseError(f"port {port} on 127.0.0.1 is taken; choose another with --port")
    _, spark = spark_for(args, "sql-server", conf)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    mode = "read-write" if args.allow_writes else "read-only"
    who = f"user {settings.sql.user} with its password" if settings.sql.user else "anyone"
    echo(
        f"SQL server ({mode}, admitting {who}{', over TLS' if tls else ''}) on "
        f"{sql.jdbc_url(settings.sql.host, port, tls)}; Ctrl-C stops it"
    )
    sql.serve(spark, settings.sql, stop)
    echo("SQL server stopped")
