"""Kafka -> bronze.sensor_records against Kafka -> Spark's `noop` sink, in one process.

Both read the same records from the same broker with the same source options; the ratio
is what bronze's Delta write, lineage columns and exactly-once bookkeeping cost.
In-stream validation is off here: benchmarks/quality.py measures what it adds.
After an untimed warm-up run, baseline and bronze alternate twice and the best run of each
counts, so JIT warm-up and page cache favour neither side.

    python -m benchmarks.bronze                 # ~1M records
    python -m benchmarks.bronze --updates 100   # a quick look
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bronze import sensor_records
from lakehouse.producer import TrafficSpec, produce
from lakehouse.services.kafka import EmbeddedKafka
from lakehouse.settings import Settings, load_settings
from lakehouse.spark import build_spark


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sensors", type=int, default=10)
    parser.add_argument("--sessions", type=int, default=100, help="per sensor")
    parser.add_argument("--updates", type=int, default=998, help="per session")
    parser.add_argument("--rows", type=int, default=200, help="per snapshot")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-bronze-") as tmp:
        root = Path(tmp)
        broker = EmbeddedKafka(root / "kafka")
        bootstrap = broker.start()
        try:
            settings = load_settings(
                "local",
                environ={
                    "LAKEHOUSE__STORAGE__ROOT": str(root / "lake"),
                    "LAKEHOUSE__QUALITY__VALIDATE_STREAMS": "false",
                    "LAKEHOUSE__CATALOG__METASTORE": "none",
                    "LAKEHOUSE__KAFKA__BOOTSTRAP_SERVERS": bootstrap,
                    "LAKEHOUSE__KAFKA__PARTITIONS": "4",
                },
            )
            spec = TrafficSpec(
                sensors=args.sensors,
                sessions_per_sensor=args.sessions,
                updates_per_session=args.updates,
                rows_per_snapshot=args.rows,
                partitions=settings.kafka.partitions,
            )
            print(
                f"producing {args.sensors * args.sessions * (args.updates + 2):,} records ...",
                flush=True,
            )
            report = produce(spec, bootstrap, progress=True)
            print(report.to_text().splitlines()[0], flush=True)
            spark = build_spark(settings, app_name="bench-bronze")
            print("warm-up run (not timed) ...", flush=True)
            time_noop(spark, settings, bootstrap, root / "warm-up")
            noop_runs, bronze_runs = [], []
            for attempt in range(2):
                noop_runs.append(time_noop(spark, settings, bootstrap, root / f"noop-{attempt}"))
                lake = load_settings(
                    "local",
                    environ={
                        "LAKEHOUSE__STORAGE__ROOT": str(root / f"lake-{attempt}"),
                        "LAKEHOUSE__QUALITY__VALIDATE_STREAMS": "false",
                        "LAKEHOUSE__CATALOG__METASTORE": "none",
                        "LAKEHOUSE__KAFKA__BOOTSTRAP_SERVERS": bootstrap,
                    },
                )
                started = time.perf_counter()
                stats = sensor_records.run(spark, lake)
                bronze_runs.append(time.perf_counter() - started)
                assert stats.input_rows == report.records, "bronze must ingest every record"
        finally:
            broker.stop()

    noop_s, bronze_s = min(noop_runs), min(bronze_runs)
    n = report.records
    print(f"\nrecords:            {n:,}")
    print(f"kafka -> noop:      {n / noop_s:>12,.0f} records/s  (best of {_runs(noop_runs)})")
    print(f"kafka -> bronze:    {n / bronze_s:>12,.0f} records/s  (best of {_runs(bronze_runs)})")
    print(f"ratio bronze/noop:  {noop_s / bronze_s:.2f}")


def _runs(seconds: list[float]) -> str:
    return ", ".join(f"{s:.1f}s" for s in seconds)


def time_noop(spark, settings: Settings, bootstrap: str, checkpoint: Path) -> float:  # type: ignore[no-untyped-def]
    source = sensor_records.read_kafka(
        spark, bootstrap, settings.kafka, settings.bronze.max_offsets_per_trigger
    )
    started = time.perf_counter()
    query = (
        source.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
