"""A batch's own values (its id, its instant) written as literals against the same values
joined in as a one-row frame, in one application.

A literal is compiled into the batch's generated code, so each batch compiles its projection
anew; a one-row frame keeps the code the same from batch to batch but is a join, planned and
broadcast on every write. Both lines append the same rows (one cached frame, `--rows` of them)
in the same columns, `--batches` times each, to a Delta table of their own, after one untimed
round of both; alternating, best of two. Prints seconds per batch and the ratio.

    python -m benchmarks.batch_values
    python -m benchmarks.batch_values --rows 10000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from pyspark.sql import DataFrame

from benchmarks.common import run_settings
from lakehouse.runtime.spark import build_spark
from lakehouse.storage import delta

STAMP = "ingested_at TIMESTAMP NOT NULL, batch_id BIGINT NOT NULL"


def as_literals(rows: DataFrame, batch_id: int) -> DataFrame:
    return delta.stamped(
        rows, ("ingested_at", "timestamp", datetime.now(UTC)), ("batch_id", "bigint", batch_id)
    )


def as_a_joined_frame(rows: DataFrame, batch_id: int) -> DataFrame:
    return rows.crossJoin(rows.sparkSession.createDataFrame([(datetime.now(UTC), batch_id)], STAMP))


def seconds_per_batch(
    stamp: Callable[[DataFrame, int], DataFrame], rows: DataFrame, table: str, batches: int
) -> float:
    stamp(rows, 0).write.format("delta").save(table)
    started = time.perf_counter()
    for batch_id in range(1, batches + 1):
        stamp(rows, batch_id).write.format("delta").mode("append").save(table)
    return (time.perf_counter() - started) / batches


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--batches", type=int, default=15)
    args = parser.parse_args()
    lines = {"literals": as_literals, "a joined one-row frame": as_a_joined_frame}
    with tempfile.TemporaryDirectory(prefix="bench-batch-values-") as folder:
        spark = build_spark(run_settings(Path(folder)), app_name="bench-batch-values")
        rows = spark.range(args.rows).selectExpr("id", "concat('value ', id) AS value").persist()
        rows.count()
        best: dict[str, float] = {}
        for round_ in range(3):  # the first round warms up (JIT, Delta's first commits)
            for name, stamp in lines.items():
                seconds = seconds_per_batch(stamp, rows, f"{folder}/{name}-{round_}", args.batches)
                if round_:
                    best[name] = min(best.get(name, seconds), seconds)
        spark.stop()
    print(f"\n{args.rows:,} rows a batch, {args.batches} batches, best of two rounds:")
    for name, seconds in best.items():
        print(f"  {name:<24} {seconds:6.3f} s a batch")
    print(f"ratio literals / joined frame: {best['literals'] / best['a joined one-row frame']:.2f}")


if __name__ == "__main__":
    main()
