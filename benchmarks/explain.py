"""`lakehouse explain` on a built lake (the demo's, by default): how long one session takes
after the Spark start, and how much of bronze it reads.

Bronze keeps file statistics on topic, partition and offset, not on the key: explain reads it
over the session's Kafka range (from silver's lineage), where a read by key alone (the
baseline) opens every file of the table. Prints, for `--sessions` sessions (those
with the most records, then the fewest, alternating): the seconds of each explanation, the
first one cold; and for the first session, bronze's files in all, the files each read opened
and their seconds, with the ratio.

    make demo   # or any lake; then:
    python -m benchmarks.explain --state .state/demo
"""

from __future__ import annotations

import argparse
import os
import time

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakehouse import PROJECT_ROOT
from lakehouse.core.settings import load_settings
from lakehouse.ops import explain
from lakehouse.runtime.spark import session_for


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--state", default=".state/demo", help="the lake's local state folder")
    parser.add_argument("--sessions", type=int, default=4)
    args = parser.parse_args()
    state = (PROJECT_ROOT / args.state).resolve()
    os.environ.setdefault("LAKEHOUSE__STORAGE__ROOT", str(state / "lake"))
    os.environ.setdefault("LAKEHOUSE__STORAGE__LOCAL_STATE", str(state))
    os.environ.setdefault("LAKEHOUSE__QUALITY__LOCAL_DIR", str(state / "quality"))
    os.environ.setdefault("LAKEHOUSE__CATALOG__METASTORE", "none")
    settings = load_settings()
    started = time.monotonic()
    spark = session_for(settings, "bench-explain", explain.SHORT_RUN)
    print(f"Spark started in {time.monotonic() - started:.1f} s")
    sessions = spark.read.format("delta").load(settings.storage.table_uri("silver.sessions"))
    by_size = [(r.sensor_id, r.session_id) for r in sessions.orderBy(F.desc("records")).collect()]
    chosen = [by_size[i // 2] if i % 2 == 0 else by_size[-1 - i // 2] for i in range(args.sessions)]
    for number, (sensor, session) in enumerate(chosen):
        began = time.monotonic()
        found = explain.explain_session(spark, settings, sensor, session)
        seconds = time.monotonic() - began
        kafka = found.kafka[0]
        print(
            f"explain {sensor}/{session} ({kafka.records:,} records): {seconds:.1f} s"
            + (" (the first after the Spark start)" if number == 0 else "")
        )
    sensor, session = chosen[0]
    kafka = explain.explain_session(spark, settings, sensor, session).kafka[0]
    bronze = spark.read.format("delta").load(settings.storage.table_uri("bronze.sensor_records"))
    key = F.col("key") == F.lit(session.encode())
    by_lineage = bronze.where(
        (F.col("topic") == kafka.topic)
        & (F.col("partition") == kafka.partition)
        & F.col("offset").between(kafka.first_offset, kafka.last_offset)
        & key
    )
    by_key = bronze.where(key)
    print(f"bronze: {len(bronze.inputFiles()):,} files")
    figures = {
        name: opened(frame) for name, frame in (("by lineage", by_lineage), ("by key", by_key))
    }
    for name, (files, rows, seconds) in figures.items():
        print(f"  read {name}: {files:,} files opened, {rows:,} rows, {seconds:.2f} s")
    ratio = figures["by lineage"][2] / figures["by key"][2]
    print(f"by lineage / by key: {ratio:.2f} of the time")


def opened(frame: DataFrame) -> tuple[int, int, float]:
    """Files the read of `frame` opened (its scan's metric), its rows and seconds (the
    second run: the first warms the plan)."""
    frame.count()
    began = time.monotonic()
    rows = frame.collect()
    seconds = time.monotonic() - began
    plan = frame._jdf.queryExecution().executedPlan()
    files = _files_read(plan)
    return files, len(rows), seconds


def _files_read(plan: object) -> int:
    """The sum of `numFiles` over the plan's file scans."""
    total, pending = 0, [plan]
    while pending:
        node = pending.pop()
        if node.getClass().getSimpleName() == "AdaptiveSparkPlanExec":  # type: ignore[attr-defined]
            pending.append(node.executedPlan())  # type: ignore[attr-defined]
            continue
        metrics = node.metrics()  # type: ignore[attr-defined]
        if metrics.contains("numFiles"):
            total += metrics.apply("numFiles").value()
        children = node.children()  # type: ignore[attr-defined]
        pending += [children.apply(i) for i in range(children.size())]
    return total


if __name__ == "__main__":
    main()
