"""End-to-end latency at a steady rate: from a record's Kafka timestamp to the silver commit
that holds it, and to the first scheduled gold run that includes that commit.

The embedded broker, then the pipeline as deployed (trigger intervals and in-stream
validation from conf/base.yaml): `lakehouse run all --continuous`, one application with
both streams and gold every `--gold-every` seconds; or, with `--separate`, the deployment
before it: `lakehouse run bronze --continuous` and `lakehouse run silver --continuous` as
their own processes and `lakehouse run gold` every `--gold-every` seconds, as a scheduler
would start it. A warm-up of 10,000 records goes through bronze, silver
and one gold run first, so that what is measured is a deployed pipeline, not JVM start-up
and table creation. Then records are produced at `--rate` for `--seconds`; once silver
holds them all, the jobs are stopped and the latencies of the measured records are read
from the tables themselves: Delta's change feed gives each silver row its commit time, its
Kafka lineage
leads to the record's timestamp in bronze, and `gold.model_runs` says which silver
version each gold run read and when it ended.

    python -m benchmarks.latency                          # 5,000 records/s for 2 minutes
    python -m benchmarks.latency --rate 1000 --seconds 60
    python -m benchmarks.latency --rate 1000 2000 3000   # the highest rate with p95 <= 30 s
    python -m benchmarks.latency --separate               # three applications
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from benchmarks.common import broker, run_environ
from lakehouse import PROJECT_ROOT
from lakehouse.core.settings import load_settings
from lakehouse.gameday.load import latencies, traffic_for
from lakehouse.ops.producer import produce
from lakehouse.runtime.spark import build_spark
from silver import reconstruct

# The line `lakehouse run` prints after each batch (lakehouse/runtime/streams.py).
SILVER_READ = re.compile(rf"{re.escape(reconstruct.QUERY_NAME)}: batch \d+ .* ([\d,]+) this run")
# The line `run all` prints after each run of gold (lakehouse/cli/jobs.py).
GOLD_RAN = re.compile(r"^gold: \d+ models", re.M)
GOLD_BEGAN = re.compile(r"^gold\.sensor_hourly: reading ", re.M)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rate",
        type=float,
        nargs="+",
        default=[5000],
        help="records per second; several: one run each, then the highest whose p95 to "
        "silver stays under 30 s",
    )
    parser.add_argument("--seconds", type=float, default=120, help="how long to produce")
    parser.add_argument("--gold-every", type=float, default=60, help="seconds between gold runs")
    parser.add_argument(
        "--separate",
        action="store_true",
        help="bronze, silver and each gold run as applications of their own",
    )
    args = parser.parse_args()
    spark: SparkSession | None = None
    p95s = {}
    for rate in args.rate:
        spark, p95s[rate] = measure(rate, args, spark)
    if len(p95s) > 1:
        steady = [rate for rate, p95 in p95s.items() if p95 <= 30]
        print(f"\nhighest rate measured with p95 to silver <= 30 s: "
              f"{f'{max(steady):,.0f} records/s' if steady else 'none'}")  # fmt: skip


def measure(
    rate: float, args: argparse.Namespace, spark: SparkSession | None
) -> tuple[SparkSession, float]:
    """One run at `rate`: its latencies printed; Spark for the next, and the p95 to silver."""
    # The traffic a game day's load phase sends at this rate (10 sensors, 4 partitions,
    # sessions of a 200-row snapshot and ~1,000 records), so that the two agree.
    spec = traffic_for(rate, args.seconds)

    with tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp:
        root = Path(tmp)
        with broker(root) as bootstrap:
            env = run_environ(root / "lake", bootstrap, quality__validate_streams="true")
            env["LAKEHOUSE__KAFKA__PARTITIONS"] = str(spec.partitions)
            env["LAKEHOUSE__GOLD__EVERY_SECONDS"] = str(args.gold_every)
            layers = ("bronze", "silver") if args.separate else ("all",)
            jobs = [job(root, env, layer) for layer in layers]
            silver_log = root / f"{layers[-1]}.log"
            stop = threading.Event()
            gold = threading.Thread(target=schedule_gold, args=(root, env, args, stop))
            try:
                print("warm-up: 10,000 records through bronze, silver and gold ...", flush=True)
                warmup = produce(traffic_for(rate, 10_000 / rate, seed=spec.seed + 1),
                                 bootstrap, rate=rate)  # fmt: skip
                wait_for_silver(silver_log, warmup.records, jobs)
                if args.separate:
                    run_gold(root, env)
                else:  # its own schedule: a run after silver's
                    wait_for_gold_after_silver(silver_log, jobs)
                measured_from = datetime.now(UTC)
                print(f"producing at {rate:,.0f} records/s ...", flush=True)
                if args.separate:
                    gold.start()
                sent = produce(spec, bootstrap, rate=rate, progress=True)
                print(sent.to_text().splitlines()[0], flush=True)
                wait_for_silver(silver_log, warmup.records + sent.records, jobs)
                if not args.separate:  # the run of gold that follows silver's last batch
                    wait_for_gold_after_silver(silver_log, jobs)
                stop.set()
                if args.separate:
                    gold.join()
            finally:
                stop.set()
                for process in jobs:
                    process.send_signal(signal.SIGTERM)
                for process in jobs:
                    process.wait(timeout=120)
            # Only now: a Spark session of its own beside the jobs would take their CPU.
            settings = load_settings("local", environ=env)
            spark = spark or build_spark(settings, app_name="bench-latency")
            return spark, report(spark, settings.storage.table_uri, measured_from, rate, args)


def job(root: Path, env: dict[str, str], layer: str) -> subprocess.Popen[bytes]:
    """`lakehouse run <layer> --continuous` in its own process, output to a log file."""
    log = (root / f"{layer}.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "lakehouse.cli", "run", layer, "--continuous"],
        env={**os.environ, **env},
        cwd=PROJECT_ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def schedule_gold(
    root: Path, env: dict[str, str], args: argparse.Namespace, stop: threading.Event
) -> None:
    """`lakehouse run gold` every `--gold-every` seconds until `stop`, then once more."""
    while True:
        stopping = stop.wait(args.gold_every)
        run_gold(root, env)
        if stopping:
            return


def run_gold(root: Path, env: dict[str, str]) -> None:
    """One `lakehouse run gold`, in its own process as a scheduler would start it."""
    with (root / "gold.log").open("ab") as log:
        subprocess.run(
            [sys.executable, "-m", "lakehouse.cli", "run", "gold"],
            env={**os.environ, **env},
            cwd=PROJECT_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )


def wait_for_gold_after_silver(
    log: Path, jobs: list[subprocess.Popen[bytes]], timeout: float = 600
) -> None:
    """Until `run all` ends a gold run after silver's last batch so far, from its log."""
    text = log.read_text(errors="replace")
    silver_at = max(m.end() for m in SILVER_READ.finditer(text))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(process.poll() is not None for process in jobs):
            raise RuntimeError(f"the job stopped before gold ran; see its log {log}")
        text = log.read_text(errors="replace")
        begun = GOLD_BEGAN.search(text, silver_at)  # a run that began after silver's batch
        if begun and GOLD_RAN.search(text, begun.end()):
            return
        time.sleep(1)
    raise TimeoutError(f"no gold run within {timeout:.0f}s")


def wait_for_silver(
    log: Path, records: int, jobs: list[subprocess.Popen[bytes]], timeout: float = 900
) -> None:
    """Until silver has read every produced record (all are valid here), from the count its
    job prints after each batch: polling a table would take CPU from the jobs measured."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(process.poll() is not None for process in jobs):
            raise RuntimeError(f"a job stopped before silver caught up; see {log.parent}")
        counts = SILVER_READ.findall(log.read_text(errors="replace"))
        if counts and int(counts[-1].replace(",", "")) >= records:
            return
        time.sleep(1)
    raise TimeoutError(f"silver did not read all {records:,} records within {timeout:.0f}s")


def report(
    spark: SparkSession,
    uri: Callable[[str], str],
    measured_from: datetime,
    rate: float,
    args: argparse.Namespace,
) -> float:
    """p50/p95 of Kafka timestamp -> silver commit, and -> the gold run that read it, of the
    records sent after the warm-up; the p95 to silver."""
    to_silver, to_gold = latencies(spark, uri, measured_from)  # as game day reads them
    deployed = "bronze, silver, gold apart" if args.separate else "run all"
    print(f"\n{deployed}: rate {rate:,.0f} records/s for {args.seconds:.0f}s, gold every "
          f"{args.gold_every:.0f}s")  # fmt: skip
    for label, found in (("silver commit", to_silver), ("gold run", to_gold)):
        print(
            f"Kafka timestamp -> {label:<14} p50 {found.p50_s:6.1f}s  p95 {found.p95_s:6.1f}s  "
            f"max {found.max_s:6.1f}s  ({found.records:,} records)"
        )
    print_batches(spark, uri, measured_from)
    return to_silver.p95_s


def print_batches(spark: SparkSession, uri: Callable[[str], str], measured_from: datetime) -> None:
    """What the streams' batches were like since `measured_from`, from ops.progress."""
    for node in ("bronze", "silver"):
        batches = (
            spark.read.format("delta")
            .load(uri(f"ops.{node}_progress"))
            .where((F.col("started_at") >= F.lit(measured_from)) & (F.col("input_rows") > 0))
            .agg(
                F.count("*"),
                F.avg("input_rows"),
                F.percentile_approx("duration_ms", 0.5),
                F.max("duration_ms"),
            )
            .first()
        )
        assert batches is not None
        n, rows, p50_ms, max_ms = batches
        print(
            f"{node} batches: {n}, {rows or 0:,.0f} records each on average, "
            f"p50 {(p50_ms or 0) / 1000:.1f}s, max {(max_ms or 0) / 1000:.1f}s"
        )


if __name__ == "__main__":
    main()
