"""Gold: an incremental run against a full refresh as the lake grows, the crossover size
below which a full refresh wins, and a gold query before and after compaction.

Bronze is written directly from generated traffic (no broker: gold is what is measured),
silver by its real job, gold once in full. The lake then grows to each size of
`--sessions` (sessions per sensor, ~600 silver row changes each). At each size, twice, one
late session of one sensor arrives, goes through silver, and gold runs incrementally
(timed), once more as `run gold` chooses, and twice more incrementally with the quality
gate that judges each model's rows before they are written (`expectations/gold/`,
reconciliations included); then a full refresh of the same data runs twice (timed). At
the end, a representative query (one sensor's hours) is timed before and after
`compact` (best of five each).

    python -m benchmarks.gold                           # up to ~15M silver row changes
    python -m benchmarks.gold --sessions 5,20           # a quick look
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import cached_property
from pathlib import Path

import pandas as pd

from benchmarks.common import fmt, run_settings, timed
from bronze import sensor_records
from lakehouse.definitions import MODELS, READERS
from lakehouse.ops.producer import TrafficSpec, generate_traffic
from lakehouse.quality.gates import WriteGate, write_gate
from lakehouse.runtime.incremental import ModelRun, run_models
from lakehouse.runtime.spark import build_spark
from lakehouse.storage import delta
from lakehouse.storage.compaction import compact, snapshot
from silver import reconstruct, row_changes

QUERY = """
    SELECT date_trunc('day', hour) AS day, sum(updates) AS updates,
           avg(temperature_mean) AS temperature, max(sessions_active) AS sessions
    FROM delta.`{path}` WHERE sensor_id = 'sensor-003' GROUP BY 1 ORDER BY 1
"""
BASE = TrafficSpec(
    sensors=10,
    sessions_per_sensor=0,
    rows_per_snapshot=100,
    updates_per_session=500,
    session_stagger_seconds=600,
    partitions=4,
)


@dataclass
class Size:
    """One size of the lake and what gold cost there."""

    changes: int
    input_mib: float
    incremental: list[float]
    auto: float
    """The runner left to choose per model (gold.full_refresh_below_mb), as `run gold` does."""
    gated: list[float]
    """Incremental runs, each model's rows judged by its suite before they are written:
    the first (which also builds the gate), then the next."""
    full: list[float]
    by_model: dict[str, tuple[float, float, str, float]]
    """model -> seconds of the best incremental and full runs, what auto chose and took."""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sessions",
        default="20,100,840,2500",
        help="sizes of the lake, in sessions per sensor (10 sensors), comma-separated",
    )
    args = parser.parse_args()
    sizes = [int(n) for n in args.sessions.split(",")]

    with tempfile.TemporaryDirectory(prefix="bench-gold-") as tmp:
        lake = Lake(Path(tmp))
        results = []
        for sessions in sizes:
            lake.grow_to(sessions)
            results.append(lake.measure())
            report(results[-1])
        hourly = lake.settings.storage.table_uri("gold.sensor_hourly")
        query = QUERY.format(path=hourly)
        files_before = snapshot(lake.spark, hourly).files
        before = [timed(lambda: lake.spark.sql(query).collect()) for _ in range(5)]
        compact(
            lake.spark, lake.settings, READERS, ["gold.sensor_hourly"], vacuum=False, echo=print
        )
        after = [timed(lambda: lake.spark.sql(query).collect()) for _ in range(5)]
        files_after = snapshot(lake.spark, hourly).files

    print(
        "\nsilver row changes  inputs (MiB)  incremental  full refresh  full/incremental  "
        "auto  full/auto  gated (first)  gated/incremental"
    )
    for r in results:
        print(
            f"{r.changes:>18,}  {r.input_mib:>12,.1f}  {min(r.incremental):>10.1f}s  "
            f"{min(r.full):>11.1f}s  {min(r.full) / min(r.incremental):>16.2f}  "
            f"{r.auto:>4.1f}s  {min(r.full) / r.auto:>9.2f}  {r.gated[1]:>5.1f}s "
            f"({r.gated[0]:>4.1f}s)  {r.gated[1] / min(r.incremental):>17.2f}"
        )
    print(f"crossover: {crossover(results)}")
    print(f"query before compaction: {min(before):8.3f} s  ({files_before} files)")
    print(f"query after compaction:  {min(after):8.3f} s  ({files_after} files)")
    print(f"ratio before/after:      {min(before) / min(after):8.2f}")


class Lake:
    """Bronze, silver and gold under `root`, grown session by session."""

    def __init__(self, root: Path) -> None:
        self.settings = run_settings(root / "lake")
        self.spark = build_spark(self.settings, app_name="bench-gold")
        self.spark.sparkContext.setLogLevel("ERROR")
        self.spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
        self.bronze = self.settings.storage.table_uri("bronze.sensor_records")
        delta.create(self.spark, sensor_records.TABLE, self.bronze)
        self.offsets: dict[tuple[str, int], int] = defaultdict(int)
        self.sessions = 0
        self.late = 0

    def grow_to(self, sessions: int) -> None:
        """Sessions per sensor up to `sessions`, through silver and gold (not timed)."""
        if sessions <= self.sessions:
            return
        self.append(
            replace(
                BASE,
                seed=sessions,
                sessions_per_sensor=sessions - self.sessions,
                start_time=BASE.start_time
                + timedelta(seconds=self.sessions * BASE.session_stagger_seconds),
            )
        )
        self.sessions = sessions
        print(f"silver to {sessions} sessions per sensor ...", flush=True)
        reconstruct.run(self.spark, self.settings)
        started = time.perf_counter()
        run_models(self.spark, self.settings.storage, MODELS, echo=lambda _: None)
        print(f"gold catching up: {time.perf_counter() - started:.1f}s", flush=True)

    def measure(self) -> Size:
        """Two late sessions, each with an incremental run, a third with the runner left to
        choose; then two full refreshes."""
        incremental = [self.gold_after_late_session("incremental") for _ in range(2)]
        auto = self.gold_after_late_session("auto")
        # The first gated run also builds the gate (a GX context, its tables), as every
        # `run gold` does once: both are kept, the steady one compared.
        gated = [self.gold_after_late_session("incremental", gated=True) for _ in range(2)]
        full = [self.gold("full") for _ in range(2)]
        best_incremental = min(incremental, key=wall)[1]
        best_full = min(full, key=wall)[1]
        changes = self.spark.read.format("delta").load(self.table(row_changes.NAME)).count()
        detail = self.spark.sql(f"DESCRIBE DETAIL delta.`{self.table(row_changes.NAME)}`")
        return Size(
            changes,
            (detail.first() or {"sizeInBytes": 0})["sizeInBytes"] / 2**20,
            [wall(run) for run in incremental],
            wall(auto),
            [wall(run) for run in gated],
            [wall(run) for run in full],
            {
                i.model: (i.seconds, f.seconds, a.mode, a.seconds)
                for i, f, a in zip(best_incremental, best_full, auto[1], strict=True)
            },
        )

    def gold_after_late_session(
        self, mode: str, gated: bool = False
    ) -> tuple[float, list[ModelRun]]:
        """One late session of one sensor (a few hours of one day change) through silver,
        then gold."""
        self.late += 1
        self.append(
            replace(
                BASE,
                seed=10_000 + self.late,
                sensors=1,
                first_sensor=1 + self.late % BASE.sensors,
                sessions_per_sensor=1,
                start_time=BASE.start_time + timedelta(hours=self.late),
            )
        )
        reconstruct.run(self.spark, self.settings)
        return self.gold(mode, gated)

    def gold(self, mode: str, gated: bool = False) -> tuple[float, list[ModelRun]]:
        """Every model `full`, `incremental`, or `auto` as `lakehouse run gold` chooses: the
        run's seconds (models of a wave run at once) and each model's run; `gated`: with
        the gold quality gate, built once per application as `run gold` builds it."""
        threshold = {"full": 0, "incremental": 0, "auto": self.settings.gold.full_refresh_below_mb}
        started = time.perf_counter()
        runs = run_models(
            self.spark,
            self.settings.storage,
            MODELS,
            full_refresh=mode == "full",
            full_below_bytes=int(threshold[mode] * 2**20),
            echo=lambda _: None,
            gate=self.gate if gated else None,
        )
        assert mode == "auto" or all(r.mode == mode for r in runs), runs
        return time.perf_counter() - started, runs

    @cached_property
    def gate(self) -> WriteGate:
        s = self.settings
        return write_gate(s.quality, s.storage, "gold")

    def table(self, name: str) -> str:
        return self.settings.storage.table_uri(name)

    def append(self, spec: TrafficSpec, chunk: int = 500_000) -> None:
        """`spec`'s records into bronze in the order a broker would serve them (by event
        time, offsets running on per partition), `chunk` records per commit."""
        rows: list[tuple[str, int, int, bytes | None, bytes]] = []
        for r in generate_traffic(spec):
            offset = self.offsets[(r.topic, r.partition)]
            self.offsets[(r.topic, r.partition)] += 1
            rows.append((r.topic, r.partition, offset, r.key, r.value))
            if len(rows) == chunk:
                self._write(rows)
                rows = []
        if rows:
            self._write(rows)

    def _write(self, rows: list[tuple[str, int, int, bytes | None, bytes]]) -> None:
        now = pd.Timestamp(datetime.now(UTC))
        frame = pd.DataFrame(rows, columns=["topic", "partition", "offset", "key", "value"])
        frame = frame.assign(
            kafka_timestamp=now, kafka_timestamp_type=0, headers=None, ingested_at=now, batch_id=0
        )
        schema = self.spark.read.format("delta").load(self.bronze).schema
        delta.append(self.spark.createDataFrame(frame, schema), self.bronze)


def wall(run: tuple[float, list[ModelRun]]) -> float:
    return run[0]


def report(size: Size) -> None:
    print(
        f"{size.changes:,} silver row changes ({size.input_mib:,.1f} MiB): incremental "
        f"{fmt(size.incremental)}, auto {size.auto:.1f}s, full refresh {fmt(size.full)}",
        flush=True,
    )
    for model, (incremental, full, chosen, auto) in size.by_model.items():
        print(
            f"  {model:<24} incremental {incremental:6.1f}s  full {full:6.1f}s  "
            f"auto: {chosen} {auto:.1f}s",
            flush=True,
        )


def crossover(results: list[Size], model: str = "gold.sensor_hourly") -> str:
    """The size of `model`'s input (silver.row_changes) where its full refresh stops being
    cheaper than an incremental run, interpolated linearly: what
    gold.full_refresh_below_mb should be."""
    gaps = [(r.input_mib, r.by_model[model][1] - r.by_model[model][0]) for r in results]
    for (small_mib, small_gap), (large_mib, large_gap) in itertools.pairwise(gaps):
        if small_gap <= 0 < large_gap:
            mib = small_mib + -small_gap / (large_gap - small_gap) * (large_mib - small_mib)
            return f"{model}: ~{mib:,.1f} MiB of silver.row_changes"
    if gaps and gaps[0][1] > 0:
        return f"{model}: below {gaps[0][0]:,.1f} MiB (incremental wins at every size measured)"
    return f"{model}: above every size measured (full refresh wins at each)"


if __name__ == "__main__":
    main()
