"""`lakehouse sql|sql-server`: the tables by name, read-only unless asked."""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path
from typing import Any

from lakehouse.cli.context import spark_for
from lakehouse.console import echo
from lakehouse.errors import LakehouseError


def add_commands(commands: Any) -> None:
    from lakehouse.sql import FORMATS

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
        choices=FORMATS,
        default="table",
        help="table (default), csv with a header, or json (one object per line)",
    )
    sql.add_argument(
        "--max-rows", type=int, default=1000, help="table format: show at most this many rows"
    )
    sql.add_argument("--allow-writes", action="store_true", help="permit DDL and DML")
    sql.set_defaults(handler=run_sql)

    server = commands.add_parser(
        "sql-server",
        help="Spark's Thrift JDBC/ODBC server on 127.0.0.1 for BI tools and beeline, read-only",
        description="Serve the shared catalog over JDBC/ODBC (HiveServer2 protocol) until "
        "Ctrl-C, e.g. beeline -u jdbc:hive2://127.0.0.1:10000/gold. Read-only unless "
        "--allow-writes is given; no client setting can switch that off.",
    )
    server.add_argument("--port", type=int, default=10000, help="default: 10000")
    server.add_argument("--allow-writes", action="store_true", help="permit DDL and DML")
    server.set_defaults(handler=run_sql_server)


def run_sql(args: argparse.Namespace) -> None:
    from lakehouse import sql

    if bool(args.statement) == bool(args.file):
        raise LakehouseError("give either a statement or -f FILE")
    text = args.statement or _read_text(Path(args.file))
    statements = sql.split_statements(text)
    if not statements:
        raise LakehouseError("no SQL statement given")
    _, spark = spark_for(args, "sql", sql.session_conf(args.allow_writes))
    sql.run_statements(spark, statements, args.format, args.max_rows)


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as error:
        raise LakehouseError(f"cannot read {path}: {error.strerror}") from None


def run_sql_server(args: argparse.Namespace) -> None:
    from lakehouse import sql
    from lakehouse.services import process

    if not process.free(args.port):
        raise LakehouseError(f"port {args.port} on 127.0.0.1 is taken; choose another with --port")
    _, spark = spark_for(args, "sql-server", sql.session_conf(args.allow_writes, args.port))
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    mode = "read-write" if args.allow_writes else "read-only"
    echo(f"SQL server ({mode}) on jdbc:hive2://127.0.0.1:{args.port}/default; Ctrl-C stops it")
    sql.serve(spark, stop)
    echo("SQL server stopped")
