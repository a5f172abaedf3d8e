"""bronze and silver beyond one machine against on it, on the same records, in one process.

(1) storage: every table and checkpoint on the embedded S3 server (SeaweedFS, through S3A)
    against local disk, both on `local[2]`;
(2) compute: the embedded 2-worker Spark standalone cluster (a core each, executors in
    their own JVMs, the project shipped as a zip) against `local[2]`, both on local disk.

Each side runs the real jobs (`run bronze` then `run silver`, in-stream validation off as
in benchmarks/bronze.py); after an untimed warm-up, the sides alternate twice and the best
run of each counts. Storage shares one application; compute needs one per run (a master
is fixed per application), each warmed up first. Ratios are throughput against the
baseline (1.00: as fast).

    python -m benchmarks.platforms                  # ~60k records
    python -m benchmarks.platforms --updates 50     # a quick look
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from pyspark.sql import SparkSession

from benchmarks.common import broker, run_settings, traffic_parser, traffic_spec
from bronze import sensor_records
from lakehouse.core.console import echo
from lakehouse.core.settings import Settings
from lakehouse.ops.producer import produce
from lakehouse.runtime.spark import build_spark
from lakehouse.services.cluster import EmbeddedCluster
from lakehouse.services.s3 import EmbeddedS3
from silver import reconstruct

KEYS = ("bench", "bench-secret")
CLUSTER_CONF = {
    "spark.cores.max": "2",
    "spark.executor.cores": "1",
    "spark.executor.memory": "1536m",
}


def disk_settings(root: Path, bootstrap: str, name: str) -> Settings:
    return run_settings(root / name, bootstrap, spark__master="local[2]")


def s3_settings(root: Path, bootstrap: str, endpoint: str, name: str) -> Settings:
    return run_settings(
        root / name,
        bootstrap,
        spark__master="local[2]",
        storage__root=f"s3a://bench/{name}",
        s3__endpoint=endpoint,
        s3__access_key=KEYS[0],
        s3__secret_key=KEYS[1],
    )


def cluster_settings(root: Path, bootstrap: str, name: str) -> Settings:
    return run_settings(
        root / name,
        bootstrap,
        spark__master="embedded",
        spark__conf=json.dumps(CLUSTER_CONF),
        storage__local_state=str(root / "state"),
    )


def main() -> None:
    args = traffic_parser(__doc__, sessions=20, updates=300).parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-platforms-") as tmp:
        root = Path(tmp)
        s3 = EmbeddedS3(root / "s3", *KEYS)
        cluster = EmbeddedCluster.under(root / "state", workers=2, cores=1, memory="2g")
        try:
            endpoint = s3.start(buckets=("bench",))
            with broker(root) as bootstrap:
                spec = traffic_spec(args, partitions=4)
                echo(f"producing {args.sensors * args.sessions * (args.updates + 2):,} records")
                records = produce(spec, bootstrap, progress=True).records

                on_disk = partial(disk_settings, root, bootstrap)
                on_s3 = partial(s3_settings, root, bootstrap, endpoint)
                on_cluster = partial(cluster_settings, root, bootstrap)
                echo("storage: local disk against S3, in one application ...")
                spark = build_spark(on_s3("warm-up-s3"), app_name="bench-platforms")
                layers(spark, on_disk("warm-up-disk"), records)  # untimed: JIT, page cache
                layers(spark, on_s3("warm-up-s3"), records)
                disk, object_store = compare(
                    lambda n: layers(spark, on_disk(f"disk-{n}"), records),
                    lambda n: layers(spark, on_s3(f"s3-{n}"), records),
                )
                spark.stop()

                echo("compute: local[2] against the 2-worker cluster, an application each ...")
                cluster.start()
                local, clustered = compare(
                    lambda n: in_new_application(on_disk, f"local-{n}", records),
                    lambda n: in_new_application(on_cluster, f"cluster-{n}", records),
                )
        finally:
            cluster.stop()
            s3.stop()

    echo(f"\nrecords: {records:,}")
    report("bronze", "local disk", disk[0], "S3", object_store[0], records)
    report("silver", "local disk", disk[1], "S3", object_store[1], records)
    report("bronze", "local[2]", local[0], "cluster", clustered[0], records)
    report("silver", "local[2]", local[1], "cluster", clustered[1], records)


Timing = tuple[float, float]
"""Seconds of bronze, then of silver, in one run."""


def layers(spark: SparkSession, settings: Settings, records: int) -> Timing:
    """Run bronze, then silver, over every record; the seconds of each."""
    started = time.perf_counter()
    stats = sensor_records.run(spark, settings)
    bronze_s = time.perf_counter() - started
    assert stats.input_rows == records, "bronze must ingest every record"
    started = time.perf_counter()
    reconstruct.run(spark, settings)
    return bronze_s, time.perf_counter() - started


def in_new_application(settings_of: Callable[[str], Settings], name: str, n: int) -> Timing:
    """A run in an application of its own (a master is fixed per application), after an
    untimed one that warms its JVMs up."""
    spark = build_spark(settings_of(f"{name}-warm-up"), app_name=f"bench-platforms-{name}")
    try:
        layers(spark, settings_of(f"{name}-warm-up"), n)
        return layers(spark, settings_of(name), n)
    finally:
        spark.stop()


def compare(*sides: Callable[[int], Timing]) -> list[Timing]:
    """Each side twice, alternating; per side the best seconds of each layer."""
    runs: list[list[Timing]] = [[] for _ in sides]
    for attempt in range(2):
        for side, run in zip(runs, sides, strict=True):
            side.append(run(attempt))
            echo(f"  run {attempt + 1}: bronze {side[-1][0]:.1f}s, silver {side[-1][1]:.1f}s")
    return [(min(b for b, _ in side), min(s for _, s in side)) for side in runs]


def report(layer: str, base: str, base_s: float, other: str, other_s: float, n: int) -> None:
    echo(
        f"{layer:<7} {base:>10}: {n / base_s:>9,.0f} records/s   {other:>8}: "
        f"{n / other_s:>9,.0f} records/s   ratio {other}/{base}: {base_s / other_s:.2f}"
    )


if __name__ == "__main__":
    main()
