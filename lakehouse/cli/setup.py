"""`lakehouse setup`: what the project needs on this machine, resolved once."""

from __future__ import annotations

import argparse
from typing import Any

from lakehouse.core.console import echo


def add_commands(commands: Any) -> None:
    command = commands.add_parser(
        "setup", help="resolve the pinned JVM jars and Data Docs assets (make setup runs it)"
    )
    command.add_argument("--force", action="store_true", help="resolve again even if unchanged")
    command.set_defaults(handler=run_setup)


def run_setup(args: argparse.Namespace) -> None:
    from lakehouse.report import data_docs
    from lakehouse.services import jars, metastore

    jars.resolve(force=args.force)
    jars.build_sql_extension(force=args.force)
    echo(f"JVM jars ready in {jars.JARS_DIR}")
    echo(f"metastore schema ready in {metastore.create_template(force=args.force)}")
    echo(f"Data Docs scripts and styles ready in {data_docs.fetch_assets(force=args.force)}")
