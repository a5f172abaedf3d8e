"""The fixed cost of each step as the deployed pipeline runs it: a bronze batch, a silver
batch (each with its in-stream quality gate), gold's models (each with its write gate) and
gold's checks, at 0, 1, 100 and 10,000 new records, and the classes Spark compiled for each.

One application, one broker, one lake, as `run all --continuous` runs them: bronze and
silver run on (continuous, each in a thread of its own) while this process sends records
and waits for both to take them in. A batch's time is Spark's own (`triggerExecution` of
its progress event: planning, the read, `foreachBatch`'s writes and gate, the commit). Gold's
models are then walked as `run all` walks them (recorded, their results written) twice: over
the new rows, and again over inputs that did not change, which is what each scheduled run
of an idle pipeline costs; then gold's checks (`lakehouse check`, the check nodes of
`build`) over those unchanged tables, and once more, as a scheduled run of an idle
pipeline checks them again; for the unchanged walk and the first checks, also the slowest
node of the walk (its own time, the walk's one progress record aside), and per model its
node and its table's check node over unchanged inputs together (`model+check`, the
slowest model's). Classes compiled are Spark's
`CodegenMetrics` count between the steps; silver starts planning its batch as soon as
bronze commits, so a few of silver's classes may be counted as bronze's.

Each size runs `--rounds` times after two untimed warm-up rounds (every plan once); the
medians count. At 0 records no batch runs; the line gives gold's walk only.

    python -m benchmarks.fixed
    python -m benchmarks.fixed --rounds 1 --sizes 0 100
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener

from benchmarks.common import broker, run_settings
from lakehouse.core.settings import Settings
from lakehouse.definitions import STREAMS, NodeRunner, graph, run_stream
from lakehouse.graph.nodes import Node, select
from lakehouse.ops.producer import TrafficSpec, produce
from lakehouse.runtime.spark import build_spark
from lakehouse.runtime.streams import StreamRun
from lakehouse.runtime.walk import NodeResult, walk

BRONZE, SILVER = "bronze.sensor_records", "silver.sessions_stream"
"""The streams' query names, as their progress events name them."""
SIZES = (0, 1, 100, 10_000)
WAIT_S = 300.0


def traffic(records: int, round_number: int) -> TrafficSpec:
    """Exactly `records` records: new sessions of one sensor, each a snapshot of 10 rows
    and then updates, left open; each round an hour later in the data's time."""
    sessions = max(1, records // 1_000)
    return TrafficSpec(
        seed=1_000 + round_number,
        sensors=1,
        sessions_per_sensor=sessions,
        rows_per_snapshot=10,
        updates_per_session=records // sessions - 1,
        end_sessions=False,
        start_time=TrafficSpec.start_time + timedelta(hours=round_number),
        partitions=2,
        topic_prefix="fixed.",
    )


@dataclass
class Batches(StreamingQueryListener):
    """The progress events of this application's streams: (input rows, milliseconds) of
    each batch by query name, in order."""

    seen: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def onQueryStarted(self, event: object) -> None: ...

    def onQueryIdle(self, event: object) -> None: ...

    def onQueryTerminated(self, event: object) -> None: ...

    def onQueryProgress(self, event: object) -> None:
        progress = event.progress  # type: ignore[attr-defined]
        if progress.numInputRows == 0:
            return
        with self.changed:
            self.seen.setdefault(progress.name, []).append(
                (progress.numInputRows, progress.durationMs.get("triggerExecution", 0))
            )
            self.changed.notify_all()

    def rows(self, name: str) -> int:
        with self.changed:
            return sum(rows for rows, _ in self.seen.get(name, []))

    def wait_for(self, name: str, total_rows: int) -> list[tuple[int, int]]:
        """Every batch of `name` so far, once they add up to `total_rows` input rows."""
        deadline = time.monotonic() + WAIT_S
        with self.changed:
            while sum(rows for rows, _ in self.seen.get(name, [])) < total_rows:
                if not self.changed.wait(max(0.0, deadline - time.monotonic())):
                    raise TimeoutError(f"{name} did not take in {total_rows:,} rows")
            return list(self.seen[name])


@dataclass
class Step:
    seconds: list[float] = field(default_factory=list)
    classes: list[int] = field(default_factory=list)

    def add(self, seconds: float, classes: int) -> None:
        self.seconds.append(seconds)
        self.classes.append(classes)

    def __str__(self) -> str:
        if not self.seconds:
            return f"{'-':>8} {'':>8}"
        return f"{statistics.median(self.seconds):7.2f}s {statistics.median(self.classes):8.0f}"


class Pipeline:
    """Bronze and silver running on in one application, and gold walked on request."""

    def __init__(self, spark: SparkSession, settings: Settings, bootstrap: str) -> None:
        self.spark, self.settings, self.bootstrap = spark, settings, bootstrap
        self.batches = Batches()
        spark.streams.addListener(self.batches)
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._stream, args=(layer,), daemon=True)
            for layer in ("bronze", "silver")
        ]
        pipeline = graph(settings)
        # As `run all` runs gold: its models, each judged by the gold gate as it writes.
        self.gold = select(pipeline, ["layer:gold,type:model"])
        self.checks = select(pipeline, ["layer:gold,type:check"])
        self.graph = pipeline
        metrics = spark._jvm.org.apache.spark.metrics.source  # type: ignore[union-attr]
        self.codegen = metrics.CodegenMetrics.METRIC_COMPILATION_TIME()

    def _stream(self, layer: str) -> None:
        how = StreamRun(continuous=True, stop=self.stop)
        run_stream(self.spark, self.settings, STREAMS[layer], how)

    def __enter__(self) -> Pipeline:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=WAIT_S)

    def compiled(self) -> int:
        return int(self.codegen.getCount())

    def round(self, records: int, number: int, steps: dict[str, Step]) -> None:
        """Send `records`, time each stream's batches of them, then gold twice."""
        marks = {name: self.batches.rows(name) for name in (BRONZE, SILVER)}
        before = self.compiled()
        if records:
            sent = produce(traffic(records, number), self.bootstrap).records
            assert sent == records, f"sent {sent:,} records, not {records:,}"
            for name in (BRONZE, SILVER):
                seen = self.batches.wait_for(name, marks[name] + records)
                new = seen[-_batches_since(seen, marks[name]) :]
                after = self.compiled()
                seconds = sum(ms for _, ms in new) / 1000
                steps[name].add(seconds / len(new), (after - before) // len(new))
                before = after
        self._walk(self.gold, steps["gold"])  # over what just arrived
        models = self._walk(self.gold, steps["gold unchanged"], steps["unchanged node"])
        self._walk(self.checks, steps["gold checks"], steps["check node"])
        checks = self._walk(self.checks, steps["checks unchanged"])
        # Per model, its node and its table's check, both over unchanged inputs: what a
        # scheduled run of an idle pipeline costs each model.
        check_of = {r.unique_id.removeprefix("check:"): r.execution_time for r in checks}
        steps["model+check"].add(max(r.execution_time + check_of[r.unique_id] for r in models), 0)

    def _walk(self, nodes: list[Node], step: Step, slowest: Step | None = None) -> list[NodeResult]:
        """Run `nodes` as a command does: recorded in the progress tables, its results
        written; `slowest` gets the time of its slowest node (the walk's record aside)."""
        before, started = self.compiled(), time.perf_counter()
        runner = NodeRunner(self.spark, self.settings)
        results = walk(self.settings, self.graph, nodes, runner, {}, {})
        step.add(time.perf_counter() - started, self.compiled() - before)
        if slowest is not None:
            slowest.add(max(r.execution_time for r in results), 0)
        return results


def _batches_since(seen: list[tuple[int, int]], rows_before: int) -> int:
    """How many of the last batches of `seen` came after its first `rows_before` rows."""
    total, count = sum(rows for rows, _ in seen), 0
    while total > rows_before:
        count += 1
        total -= seen[-count][0]
    return count


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, broker(Path(folder)) as bootstrap:
        settings = run_settings(Path(folder) / "lake", bootstrap, kafka__topic_prefix="fixed.",
                                storage__local_state=f"{folder}/state",
                                quality__validate_streams="true")  # fmt: skip
        spark = build_spark(settings, app_name="fixed-costs")
        results: dict[int, dict[str, Step]] = {}
        with Pipeline(spark, settings, bootstrap) as pipeline:
            number = 0
            for warm_up in (100, 100):
                pipeline.round(warm_up, number, _steps())
                number += 1
            for records in args.sizes:
                results[records] = _steps()
                for _ in range(args.rounds):
                    pipeline.round(records, number, results[records])
                    number += 1
        _report(results)


def _steps() -> dict[str, Step]:
    names = (BRONZE, SILVER, "gold", "gold unchanged", "unchanged node", "gold checks")
    names += ("check node", "checks unchanged", "model+check")
    return {name: Step() for name in names}


def _report(results: dict[int, dict[str, Step]]) -> None:
    names = list(_steps())
    print("\nmedian seconds and classes compiled per step (a stream's: per batch)")
    print(f"{'records':>8}  " + "  ".join(f"{n[:17]:>17}" for n in names))
    for records, steps in results.items():
        print(f"{records:>8,}  " + "  ".join(f"{steps[n]!s:>17}" for n in names))


if __name__ == "__main__":
    main()
