"""Silver's steady batches with Spark's cache of generated classes at its default size
(100 plans) and at the size the jobs set (`CODEGEN_CACHE` in lakehouse/runtime/spark.py).

A Spark application compiles a class for each plan it runs, and keeps them by their source
in a cache of fixed size. The size is fixed when the JVM starts, so each variant is a
process of its own (run by this one, one after the other, against one broker). In each:
bronze takes the traffic in `--batches` commits and silver the first of them; then silver
reads the others, a file a batch, with in-stream validation on. Twice, on two lakes; the
second is measured: every plan has run once, so what it compiles is what the cache lost.
Prints, per variant, the classes compiled and the seconds per batch, and the ratio of the
seconds to the default's.

    python -m benchmarks.codegen_cache
    python -m benchmarks.codegen_cache --batches 4
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import broker, run_settings
from lakehouse.ops.producer import TrafficSpec, produce
from lakehouse.runtime.spark import CODEGEN_CACHE

VARIANTS = {"spark's default": "100", "the jobs' setting": ""}
"""The cache's size in each variant; empty: what `build_spark` sets, unchanged."""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--measure", nargs=3, metavar=("ENTRIES", "BOOTSTRAP", "ROOT"),
                        help=argparse.SUPPRESS)  # fmt: skip
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure, batches=args.batches)))
        return
    baseline = None
    with tempfile.TemporaryDirectory() as folder, broker(Path(folder)) as bootstrap:
        for number, (name, entries) in enumerate(VARIANTS.items()):
            ran = subprocess.run(
                [sys.executable, "-m", "benchmarks.codegen_cache", "--batches",
                 str(args.batches), "--measure", entries, bootstrap, f"{folder}/variant-{number}"],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            result = json.loads(ran.stdout.splitlines()[-1])
            per_batch = result["seconds"] / result["batches"]
            baseline = baseline or per_batch
            print(f"{name:18} ({CODEGEN_CACHE}={result['entries']:>4}): "
                  f"{result['compiled'] / result['batches']:5.0f} classes compiled a batch, "
                  f"{per_batch:5.2f} s a batch, ratio {per_batch / baseline:.2f}")  # fmt: skip


def measure(entries: str, bootstrap: str, root: str, batches: int) -> dict[str, float | str]:
    """Silver over `batches` bronze commits after the first, twice; the second lake's
    batches, seconds and classes compiled, and the cache's size in effect."""
    from bronze import sensor_records
    from lakehouse.runtime.spark import build_spark
    from silver import reconstruct

    result: dict[str, float | str] = {}
    extra = {CODEGEN_CACHE: entries} if entries else {}
    for lake in ("warm", "measured"):
        prefix = f"{lake}."
        settings = run_settings(Path(root) / lake, bootstrap, kafka__topic_prefix=prefix,
                                silver__max_files_per_trigger="1",
                                quality__validate_streams="true")  # fmt: skip
        spark = build_spark(settings, app_name="codegen-cache", extra=extra)
        compiled = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics  # type: ignore[union-attr]
        for seed in range(batches):
            produce(TrafficSpec(seed=seed, sensors=2, sessions_per_sensor=2, rows_per_snapshot=20,
                                updates_per_session=30, partitions=2, topic_prefix=prefix),
                    bootstrap)  # fmt: skip
            sensor_records.run(spark, settings)
            if seed == 0:  # a new checkpoint takes all of bronze in its first batch
                reconstruct.run(spark, settings)
        before = compiled.METRIC_COMPILATION_TIME().getCount()
        started = time.perf_counter()
        stats = reconstruct.run(spark, settings)
        result = {
            "batches": stats.batches,
            "seconds": time.perf_counter() - started,
            "compiled": compiled.METRIC_COMPILATION_TIME().getCount() - before,
            "entries": spark.conf.get(CODEGEN_CACHE),
        }
    return result


if __name__ == "__main__":
    main()
