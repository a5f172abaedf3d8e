"""Kafka -> bronze.sensor_records against Kafka -> Spark's own `noop` and Delta sinks.

All read the same records from the same broker with the same source options: against
`noop` the ratio is everything bronze writes; against Spark's own Kafka -> Delta stream
(the peer a user would write instead) it is what bronze's lineage columns, exactly-once
bookkeeping and table management cost, and with in-stream validation on, what its
expectations and quarantine add (benchmarks/quality.py measures that on its own).
After an untimed warm-up run, baseline and bronze alternate twice and the best run of each
counts, so JIT warm-up and page cache favour neither side.

    python -m benchmarks.bronze                 # ~1M records
    python -m benchmarks.bronze --updates 100   # a quick look
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from benchmarks.common import broker, fmt, run_settings, traffic_parser, traffic_spec
from bronze import sensor_records
from lakehouse.core.console import echo
from lakehouse.core.settings import Settings
from lakehouse.ops.producer import produce
from lakehouse.runtime.spark import build_spark


def main() -> None:
    args = traffic_parser(__doc__).parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-bronze-") as tmp:
        root = Path(tmp)
        with broker(root) as bootstrap:
            settings = run_settings(root / "lake", bootstrap, kafka__partitions="4")
            spec = traffic_spec(args, partitions=settings.kafka.partitions)
            echo(f"producing {args.sensors * args.sessions * (args.updates + 2):,} records ...")
            report = produce(spec, bootstrap, progress=True)
            echo(report.to_text().splitlines()[0])
            spark = build_spark(settings, app_name="bench-bronze")
            echo("warm-up run (not timed) ...")
            time_sink(spark, settings, bootstrap, root / "warm-up", "noop")
            noop_runs, delta_runs, bronze_runs, validated_runs = [], [], [], []
            for attempt in range(2):
                noop_runs.append(
                    time_sink(spark, settings, bootstrap, root / f"noop-{attempt}", "noop")
                )
                delta_runs.append(
                    time_sink(spark, settings, bootstrap, root / f"delta-{attempt}", "delta")
                )
                for validate, runs in (("false", bronze_runs), ("true", validated_runs)):
                    lake = run_settings(
                        root / f"lake-{validate}-{attempt}",
                        bootstrap,
                        quality__validate_streams=validate,
                    )
                    started = time.perf_counter()
                    stats = sensor_records.run(spark, lake)
                    runs.append(time.perf_counter() - started)
                    assert stats.input_rows == report.records, "bronze must ingest every record"

    noop_s, delta_s, bronze_s = min(noop_runs), min(delta_runs), min(bronze_runs)
    validated_s, n = min(validated_runs), report.records
    echo(f"\nrecords:                        {n:,}")
    for label, runs in (
        ("kafka -> noop", noop_runs),
        ("kafka -> delta", delta_runs),
        ("kafka -> bronze", bronze_runs),
        ("kafka -> bronze, validated", validated_runs),
    ):
        echo(f"{label + ':':<31}{n / min(runs):>10,.0f} records/s  (best of {fmt(runs)})")
    echo(f"ratio bronze/noop:              {noop_s / bronze_s:.2f}")
    echo(f"ratio bronze/delta:             {delta_s / bronze_s:.2f}")
    echo(f"ratio bronze, validated/delta:  {delta_s / validated_s:.2f}")


def time_sink(spark, settings: Settings, bootstrap: str, folder: Path, sink: str) -> float:  # type: ignore[no-untyped-def]
    """Seconds to run the same Kafka source into Spark's own `sink`: `noop` (reading only)
    or `delta`, the plain Kafka -> Delta stream a user would write instead of bronze."""
    source = sensor_records.read_kafka(
        spark, bootstrap, settings.kafka, settings.bronze.max_offsets_per_trigger
    )
    started = time.perf_counter()
    writer = source.writeStream.format(sink).option("checkpointLocation", str(folder / "_cp"))
    query = writer.trigger(availableNow=True).start(str(folder / "table"))
    query.awaitTermination()
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
