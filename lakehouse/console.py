"""The one way the lakehouse prints: a line to standard output, flushed at once so that
progress shows while a long step runs (and in order with Spark's own output)."""

from __future__ import annotations


def echo(line: str = "") -> None:
    print(line, flush=True)
