"""`lakehouse`: the command line of the project. Each command group is a module of this
package that adds its commands to the parser; each handler is a thin entry point."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from lakehouse.cli import (
    bronze,
    build,
    explain,
    gameday,
    jobs,
    produce,
    quality,
    services,
    setup,
    shadow,
    sql,
    storage,
)
from lakehouse.core.errors import LakehouseError, SettingsError

DESCRIPTION = """\
Layered Kafka -> Delta lakehouse for ordered, stateful sensor streams.

Settings come from conf/base.yaml and conf/<target>.yaml; an environment variable
LAKEHOUSE__<SECTION>__<KEY> overrides one key (e.g. LAKEHOUSE__KAFKA__BOOTSTRAP_SERVERS).
"""
GROUPS = (
    setup,
    services,
    storage,
    produce,
    jobs,
    bronze,
    build,
    sql,
    quality,
    explain,
    gameday,
    shadow,
)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except SettingsError as error:
        print(f"lakehouse: settings error: {error}", file=sys.stderr)
        return 2
    except LakehouseError as error:
        print(f"lakehouse: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # Ctrl-C: each command's own clean-up (a `finally`) has run; a traceback would
        # only bury what it printed.
        print("lakehouse: interrupted", file=sys.stderr)
        return 130


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="lakehouse", description=DESCRIPTION, formatter_class=argparse.RawTextHelpFormatter
    )
    root.add_argument(
        "--target", help="settings target: conf/<target>.yaml (default: $LAKEHOUSE_TARGET or local)"
    )
    commands = root.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for group in GROUPS:
        group.add_commands(commands)
    return root
