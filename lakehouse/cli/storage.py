"""`lakehouse storage init|du`: the lake's bucket (or folder), and what each table takes."""

from __future__ import annotations

import argparse
from typing import Any

from lakehouse.cli.context import settings_of
from lakehouse.core.console import echo


def add_commands(commands: Any) -> None:
    command = commands.add_parser(
        "storage",
        help="create or check the lake's storage (init), or list what each table takes (du)",
        description="init: create the bucket of an s3a:// storage root or check it (say whether "
        "versioning and lifecycle rules are on) and refuse one this application cannot write; "
        "a local root is created as a folder. du: files and bytes per table and checkpoint.",
    )
    command.add_argument("action", choices=("init", "du"))
    command.set_defaults(handler=run_storage)


def run_storage(args: argparse.Namespace) -> None:
    from lakehouse.storage import buckets as storage

    settings = settings_of(args)
    if args.action == "init":
        storage.init(settings)
        return
    found = storage.usage(settings)
    echo(
        f"{settings.storage.root}: {sum(u.bytes for u in found):,} bytes in "
        f"{sum(u.files for u in found):,} files"
    )
    for item in found:
        echo(f"  {item.name:<44} {item.files:>8,} files {item.bytes:>16,} bytes")
