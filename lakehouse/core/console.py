"""The one way the lakehouse prints: a line, flushed at once so that progress shows while
a long step runs. Nothing else reaches the console: Spark's JVM writes
to its log file (`lakehouse.runtime.spark`), and `divert` sends Python's warnings and libraries' log
records there too. Errors are the command line's to print (`lakehouse.cli`)."""

from __future__ import annotations

import logging
import shutil
import sys
import threading
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

_lock = threading.Lock()
"""Lines come from the main thread and from Spark's callbacks (foreachBatch) at once."""
_live: Live | None = None
"""The live line on the terminal, if a step shows one."""


def echo(line: str = "", err: bool = False) -> None:
    """Print a line; `err` for what is about the run rather than its result (where the log
    is), so that a command's standard output stays its result alone (`lakehouse sql`)."""
    with _lock:
        if _live is not None:
            _live.clear()
        print(line, file=sys.stderr if err else sys.stdout, flush=True)


def moment(value: datetime | str | None, missing: str = "-") -> str:
    """A time as a person reads it, to the second: `2026-01-01 00:01:14` (an ISO string
    is read first); `missing` where there is none."""
    if value is None:
        return missing
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return f"{value:%Y-%m-%d %H:%M:%S}"


def record_at(row: Mapping[str, Any]) -> str:
    """The Kafka record a row names, as a person reads it: `topic/partition@offset`."""
    return f"{row['topic']}/{row['partition']}@{row['offset']:,}"


def size(n: float) -> str:
    """Bytes as a person reads them: `812 B`, `3.1 MiB`."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def duration(seconds: float) -> str:
    """A span as a person reads it: `0m 41s`, `3h 05m`, `2d 4h`."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours >= 24:
        return f"{hours // 24}d {hours % 24}h"
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"


class Live:
    """One line on a terminal, rewritten in place while a long step runs (what it has done
    so far, and the seconds it has taken); `echo` clears it before printing a line, and
    the next `show` draws it again. Off a terminal it prints nothing: a log or a pipe
    gets the step's own lines, which say enough.

        with console.Live("produce") as progress:
            for sent in ...:
                progress.show(f"{sent:,} records sent")
    """

    REDRAW_S = 0.1
    """A terminal cannot show faster; a tight loop must not spend its time drawing."""

    def __init__(self, label: str) -> None:
        self.label = label
        # One live line at a time: the main thread's (streams run side by side on others).
        self.on = sys.stdout.isatty() and threading.current_thread() is threading.main_thread()
        self.started = time.monotonic()
        self.drawn = 0.0
        self.shown = False
        self.outer: Live | None = None

    def __enter__(self) -> Live:
        global _live
        with _lock:
            self.outer, _live = _live, self
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        global _live
        with _lock:
            self.clear()
            _live = self.outer

    def show(self, text: str) -> None:
        """Show `text` after the label, with the seconds since the step began."""
        now = time.monotonic()
        if not self.on or now - self.drawn < self.REDRAW_S:
            return
        line = f"{self.label}: {text} ({now - self.started:.0f}s)"
        # Longer than the terminal, the line would wrap and `\r` would rewrite its end only.
        width = shutil.get_terminal_size().columns - 1
        with _lock:
            sys.stdout.write(f"\r\x1b[2K{line[:width]}")
            sys.stdout.flush()
            self.drawn, self.shown = now, True

    def clear(self) -> None:
        """Erase the line (the caller holds the lock)."""
        if self.shown:
            sys.stdout.write("\r\x1b[2K")
            sys.stdout.flush()
            self.shown = False
            self.drawn = 0.0  # so that the next update draws it again at once


def divert(log: Path) -> None:
    """Python's warnings and the log records of libraries (PySpark, py4j, Great
    Expectations, pandas) go to `log`, appended, rather than to the console."""
    from pyspark.logger import PySparkLogger

    log.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(log)
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%Y-%m-%d %H:%M:%S")
    )
    logging.getLogger().addHandler(handler)
    logging.captureWarnings(True)
    # PySpark logs a failed statement's query context to stderr through loggers of its own
    # that do not propagate; the error raised says it in one line.
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).handlers[:] = [handler]


def pairs(counts: dict[str, int]) -> str:
    """`success=3, warn=1`: counts by what they count."""
    return ", ".join(f"{key}={value:,}" for key, value in counts.items())
