"""The cost of in-stream validation: bronze and silver with and without it, in one process.

Both variants of a layer read the same records (bronze: the same Kafka topics; silver: the
same bronze table) into fresh tables and checkpoints; the only difference is
`quality.validate_streams`. Each variant runs twice, alternating, and the best run
counts. Prints records/s for each and the overhead, 1 - with/without.

    python -m benchmarks.quality                   # ~1M records into bronze, silver on 300k
    python -m benchmarks.quality --sessions 10     # a quick look
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

from benchmarks.common import fmt, run_settings, timed, traffic_parser, traffic_spec
from bronze import sensor_records
from lakehouse.core.settings import Settings
from lakehouse.ops.producer import produce
from lakehouse.runtime.spark import build_spark
from lakehouse.services.kafka import EmbeddedKafka
from silver import reconstruct


def main() -> None:
    parser = traffic_parser(__doc__)
    parser.add_argument(
        "--silver-sessions", type=int, default=30, help="per sensor, for the silver runs"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-quality-") as tmp:
        root = Path(tmp)
        broker = EmbeddedKafka(root / "kafka")
        bootstrap = broker.start()
        try:
            spec = traffic_spec(args, session_stagger_seconds=0.5, partitions=4)
            print(f"producing {spec.sensors * spec.sessions_per_sensor:,} sessions ...", flush=True)
            records = produce(spec, bootstrap, progress=True).records
            small = replace(spec, sessions_per_sensor=args.silver_sessions, topic_prefix="small.")
            small_records = produce(small, bootstrap, progress=True).records
            spark = build_spark(settings(root, bootstrap, True), app_name="bench-quality")

            print("warm-up run (not timed) ...", flush=True)
            sensor_records.run(spark, settings(root / "warm-up", bootstrap, True, "small."))
            bronze = {False: [], True: []}  # type: dict[bool, list[float]]
            for attempt in range(2):
                for validate in (False, True):
                    lake = settings(root / f"bronze-{validate}-{attempt}", bootstrap, validate)
                    bronze[validate].append(timed(sensor_records.run, spark, lake))

            # silver reads one shared bronze table of the smaller traffic
            source = settings(root / "silver-source", bootstrap, False, "small.")
            sensor_records.run(spark, source)
            silver = {False: [], True: []}  # type: dict[bool, list[float]]
            for attempt in range(2):
                for validate in (False, True):
                    lake = silver_over(root / f"silver-{validate}-{attempt}", source, validate)
                    silver[validate].append(timed(reconstruct.run, spark, lake))
        finally:
            broker.stop()

    print()
    report("bronze", records, bronze)
    report("silver", small_records, silver)


def settings(root: Path, bootstrap: str, validate: bool, prefix: str = "sensors.") -> Settings:
    return run_settings(
        root / "lake",
        bootstrap,
        kafka__topic_prefix=prefix,
        quality__validate_streams=str(validate).lower(),
        silver__max_files_per_trigger="40",
    )


def silver_over(root: Path, source: Settings, validate: bool) -> Settings:
    """Settings whose bronze table is `source`'s, and everything else fresh under `root`."""
    fresh = settings(root, "unused:1", validate)
    bronze = Path(source.storage.table_uri("bronze.sensor_records").removeprefix("file://"))
    (root / "lake" / "bronze").mkdir(parents=True)
    (root / "lake" / "bronze" / "sensor_records").symlink_to(bronze)
    return fresh


def report(layer: str, records: int, runs: dict[bool, list[float]]) -> None:
    without, with_ = min(runs[False]), min(runs[True])
    print(f"{layer}: {records:,} records")
    print(f"  without validation: {records / without:>10,.0f} records/s  (runs {fmt(runs[False])})")
    print(f"  with validation:    {records / with_:>10,.0f} records/s  (runs {fmt(runs[True])})")
    print(f"  validation overhead: {1 - without / with_:.0%} of throughput (goal <= 20%)")


if __name__ == "__main__":
    main()
