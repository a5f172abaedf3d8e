"""`lakehouse run all --continuous`: the pipeline's parts (the bronze and silver streams,
gold's models on a schedule) side by side in one Spark application, each restarted after a
transient failure and all stopped by a lasting one.

One application rather than one per part: on a machine of few cores, separate JVMs and
their Python workers fight for them, and every micro-batch pays its fixed costs on a busy
machine (docs/benchmarks.md, latency). Each part has its own Spark session (settings of
its own, one SparkContext): Delta reads a MERGE's transaction from session settings, so
parts sharing one would lend a batch's transaction to another's writes.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from pyspark.sql import SparkSession

from lakehouse.core.console import echo
from lakehouse.core.errors import LakehouseError, explain, transient
from lakehouse.core.settings import Settings, SupervisionSettings
from lakehouse.observe import progress
from lakehouse.runtime.streams import stopping_on_signals


@dataclass
class Budget:
    """Restarts of one part within the window: how long to wait before the next, or None
    once they are spent (pure: the time is given)."""

    settings: SupervisionSettings
    _restarts: deque[float] = field(default_factory=deque)

    def next_wait(self, now: float) -> float | None:
        while self._restarts and now - self._restarts[0] > self.settings.window_seconds:
            self._restarts.popleft()
        if len(self._restarts) >= self.settings.restarts:
            return None
        wait = self.settings.backoff_seconds * 2 ** len(self._restarts)
        self._restarts.append(now)
        return min(wait, self.settings.max_backoff_seconds)

    @property
    def spent(self) -> int:
        return len(self._restarts)


@dataclass(frozen=True)
class Part:
    """A part of the pipeline that runs until `stop` is set: it returns then, or raises."""

    name: str
    run: Callable[[threading.Event], None]


Record = Callable[[str, str, str], None]
"""`record(part, status, message)`: keeps what befell a part (restarted, error)."""


@dataclass(frozen=True)
class Failure:
    """The part whose failure ended the run, and its line."""

    part: str
    line: str


def supervise(
    parts: list[Part],
    settings: SupervisionSettings,
    stop: threading.Event,
    record: Record,
    goes_on: Callable[[str], bool] = lambda _part: True,
) -> Failure | None:
    """Run every part in a thread of its own until `stop` is set or one fails for good,
    which sets `stop` so that the others end after their running batch; the failure that
    ended the run, if one did. A part `goes_on` no longer says goes on (its version was
    swapped out) ends after its batch alone, and the others go on."""
    failures: list[Failure] = []
    ends = {part.name: threading.Event() for part in parts}

    def keep_running(part: Part) -> None:
        budget, end = Budget(settings), ends[part.name]
        while not end.is_set():
            try:
                part.run(end)
                if end.is_set():
                    return  # stopped
                failed: Exception = EndedEarly(
                    "ended while the pipeline runs (its query stopped from outside?)"
                )
            except Exception as error:
                failed = error
            line = str(failed) if isinstance(failed, LakehouseError) else explain(failed)
            again = transient(failed) or isinstance(failed, EndedEarly)
            wait = budget.next_wait(time.monotonic()) if again else None
            if end.is_set() and wait is not None:
                return  # a transient failure while stopping: nothing to restart
            if wait is None:
                if again:
                    line = (
                        f"gave up after {budget.spent} restarts within "
                        f"{settings.window_seconds:.0f}s: {line}"
                    )
                failures.append(Failure(part.name, line))
                record(part.name, "error", line)
                stop.set()
                return
            echo(
                f"{part.name}: {line}; restarting in {wait:.0f}s (restart {budget.spent} of "
                f"at most {settings.restarts} within {settings.window_seconds:.0f}s)"
            )
            record(part.name, "restarted", line)
            end.wait(wait)

    threads = [
        threading.Thread(target=keep_running, args=(p,), name=f"lakehouse-{p.name}", daemon=True)
        for p in parts
    ]
    for thread in threads:
        thread.start()
    _watch(threads, ends, stop, goes_on)
    return failures[0] if failures else None


def _watch(
    threads: list[threading.Thread],
    ends: dict[str, threading.Event],
    stop: threading.Event,
    goes_on: Callable[[str], bool],
) -> None:
    """Until every part ended: `stop` ends them all; a part `goes_on` gives up ends alone."""
    looked = time.monotonic()
    while any(thread.is_alive() for thread in threads):
        threads[0].join(0.5)  # the main thread stays free to take SIGINT and SIGTERM
        if stop.is_set():
            for end in ends.values():
                end.set()
        elif time.monotonic() - looked > LOOK_EVERY_S:
            looked = time.monotonic()
            for name in [name for name, end in ends.items() if not end.is_set()]:
                if not goes_on(name):
                    ends[name].set()


LOOK_EVERY_S = 5.0
"""How often `run all` asks whether each part's version is still live: a swap waits for
the retired version's writers about this long more."""


class EndedEarly(LakehouseError):
    """A part returned without an error while nothing stopped it: restarted like a service
    that did not answer, never left ended while the others go on."""


def every(seconds: float, run: Callable[[], None]) -> Callable[[threading.Event], None]:
    """A part that runs `run` every `seconds` until stopped (first after one period)."""

    def part(stop: threading.Event) -> None:
        while not stop.wait(seconds):
            run()

    return part


def run_all(
    spark: SparkSession,
    settings: Settings,
    streams: Mapping[str, Callable[[SparkSession, threading.Event], None]],
    gold: Callable[[SparkSession], None],
    goes_on: Callable[[str], bool] = lambda _part: True,
) -> None:
    """The pipeline as deployed: each of `streams` (`run(session, stop)`) and `gold` every
    `gold.every_seconds`, each in a Spark session and scheduler pool of its own, supervised
    until SIGINT or SIGTERM. A part that fails for good stops the others after their
    running batch, and its line is raised."""
    parts = [
        Part(name, partial(_in_pool, spark.newSession(), name, run))
        for name, run in streams.items()
    ]
    gold_in_its_pool = partial(_in_pool, spark.newSession(), "gold", gold)
    parts.append(Part("gold", every(settings.gold.every_seconds, gold_in_its_pool)))
    record = partial(_record, spark, settings, frozenset(streams))
    with stopping_on_signals("run all") as stop:
        failure = supervise(parts, settings.supervision, stop, record, goes_on)
    if failure is not None:
        raise LakehouseError(
            f"{failure.part} failed: {failure.line}; every other part stopped after its "
            "running batch"
        )


def _in_pool(session: SparkSession, pool: str, run: Callable[..., None], *args: Any) -> None:
    """`run(session, *args)` with its jobs in a scheduler pool of its own: under
    spark.scheduler.mode FAIR, parts share the cores rather than queue behind one another's
    jobs; a query started from this thread keeps it."""
    session.sparkContext.setLocalProperty("spark.scheduler.pool", pool)
    run(session, *args)


def _record(
    spark: SparkSession, settings: Settings, streams: frozenset[str], part: str, status: str,
    message: str,
) -> None:  # fmt: skip
    kind = "stream" if part in streams else "model"
    progress.record_event(spark, settings, part, kind, status, message)
