"""Gold: an incremental run against a full refresh after a small increment, and a gold
query before and after compaction, in one process on the same lake.

Bronze is written directly from generated traffic (no broker: gold is what is measured),
silver is built by its real job, then gold runs once in full. Several small increments
follow, each through silver and an incremental gold run, which leaves gold's tables in
small files. After the last increment the incremental run is timed against a full
refresh of the same data (best of two each); then a representative query (one sensor's
hours) is timed before and after `compact` (best of five each).

    python -m benchmarks.gold                  # ~240k records
    python -m benchmarks.gold --sessions 5     # a quick look
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from benchmarks.common import run_settings
from bronze import sensor_records
from lakehouse import delta
from lakehouse.compaction import compact, snapshot
from lakehouse.incremental import run_models
from lakehouse.pipeline import MODELS, READERS
from lakehouse.producer import TrafficSpec, generate_traffic
from lakehouse.spark import build_spark
from silver import reconstruct

QUERY = """
    SELECT date_trunc('day', hour) AS day, sum(updates) AS updates,
           avg(temperature_mean) AS temperature, max(sessions_active) AS sessions
    FROM delta.`{path}` WHERE sensor_id = 'sensor-003' GROUP BY 1 ORDER BY 1
"""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sensors", type=int, default=10)
    parser.add_argument("--sessions", type=int, default=40, help="per sensor")
    parser.add_argument("--updates", type=int, default=500, help="per session")
    parser.add_argument("--increments", type=int, default=6)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-gold-") as tmp:
        settings = run_settings(Path(tmp) / "lake")
        spark = build_spark(settings, app_name="bench-gold")
        spark.sparkContext.setLogLevel("ERROR")
        bronze = settings.storage.table_uri("bronze.sensor_records")
        delta.create(spark, sensor_records.TABLE, bronze)
        offsets: dict[tuple[str, int], int] = defaultdict(int)
        base = TrafficSpec(
            sensors=args.sensors,
            sessions_per_sensor=args.sessions,
            rows_per_snapshot=100,
            updates_per_session=args.updates,
            session_stagger_seconds=600,
            partitions=4,
        )
        n = append(spark, bronze, base, offsets)
        print(f"silver from {n:,} bronze records ...", flush=True)
        reconstruct.run(spark, settings)
        started = time.perf_counter()
        run_models(spark, settings.storage, MODELS, echo=lambda _: None)
        print(f"gold, first (full) run: {time.perf_counter() - started:.1f}s", flush=True)
        for i in range(args.increments):
            # One late session of one sensor: a few hours of one day change.
            late = replace(
                base,
                seed=100 + i,
                sensors=1,
                first_sensor=1 + i % args.sensors,
                sessions_per_sensor=1,
                start_time=base.start_time + timedelta(hours=i),
            )
            append(spark, bronze, late, offsets)
            reconstruct.run(spark, settings)
            incremental = timed(
                lambda: run_models(spark, settings.storage, MODELS, echo=lambda _: None)
            )
        full = [
            timed(
                lambda: run_models(
                    spark, settings.storage, MODELS, full_refresh=True, echo=lambda _: None
                )
            )
            for _ in range(2)
        ]
        print(
            f"gold after an increment of one session: incremental {incremental:.1f}s, "
            f"full refresh {min(full):.1f}s (best of {', '.join(f'{f:.1f}s' for f in full)})"
        )

        # Incremental MERGEs again, so that the query meets the files they leave.
        for i in range(args.increments):
            late = replace(
                base,
                seed=200 + i,
                sensors=1,
                first_sensor=3,
                sessions_per_sensor=1,
                start_time=base.start_time + timedelta(days=1 + i),
            )
            append(spark, bronze, late, offsets)
            reconstruct.run(spark, settings)
            run_models(spark, settings.storage, MODELS, echo=lambda _: None)
        hourly = settings.storage.table_uri("gold.sensor_hourly")
        query = QUERY.format(path=hourly)
        files_before = snapshot(spark, hourly).files
        before = [timed(lambda: spark.sql(query).collect()) for _ in range(5)]
        compact(spark, settings, READERS, ["gold.sensor_hourly"], vacuum=False, echo=lambda _: None)
        after = [timed(lambda: spark.sql(query).collect()) for _ in range(5)]
        files_after = snapshot(spark, hourly).files

    print(f"\nincremental run:         {incremental:8.2f} s")
    print(f"full refresh:            {min(full):8.2f} s")
    print(f"ratio full/incremental:  {min(full) / incremental:8.2f}")
    print(f"query before compaction: {min(before):8.3f} s  ({files_before} files)")
    print(f"query after compaction:  {min(after):8.3f} s  ({files_after} files)")
    print(f"ratio before/after:      {min(before) / min(after):8.2f}")


def append(spark, path: str, spec: TrafficSpec, offsets: dict[tuple[str, int], int]) -> int:  # type: ignore[no-untyped-def]
    now = datetime.now(UTC)
    rows = []
    for r in generate_traffic(spec):
        offset = offsets[(r.topic, r.partition)]
        offsets[(r.topic, r.partition)] += 1
        rows.append((r.topic, r.partition, offset, r.key, r.value, now, 0, [], now, 0))
    schema = spark.read.format("delta").load(path).schema
    spark.createDataFrame(rows, schema).write.format("delta").mode("append").save(path)
    return len(rows)


def timed(work) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
