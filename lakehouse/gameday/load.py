"""The load phase: traffic at a rate and at a multiple of it, Kafka's lag sampled while it
flows, then the latencies read from the tables themselves, as `benchmarks.latency` reads
them (it calls `latencies` too): Delta's change feed gives each silver row its commit time,
its Kafka lineage leads to the record's timestamp in bronze, and `gold.model_runs` says
which silver version each gold run read and when it ended."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.core.settings import Settings
from lakehouse.ops import status
from lakehouse.ops.producer import TrafficSpec, produce
from lakehouse.services.kafka import watermarks
from lakehouse.storage import positions

LOAD_SENSORS = 10
SESSION_RECORDS = 1_000
MIN_FLOORS = 3
"""Bronze commits a phase must see before it says whether the pipeline kept up."""


@dataclass(frozen=True)
class Percentiles:
    records: int
    p50_s: float
    p95_s: float
    max_s: float


@dataclass
class LoadRun:
    """One rate's figures."""

    rate: float
    seconds: float
    sent: int = 0
    lag: list[tuple[float, int]] = field(default_factory=list)
    """(seconds since the phase began, Kafka records bronze had not read)."""
    to_silver: Percentiles | None = None
    to_gold: Percentiles | None = None
    batch_ms: dict[str, float] = field(default_factory=dict)
    """Median duration of a batch with input, per stream."""
    lag_by_partition: dict[str, int] = field(default_factory=dict)
    """`topic/partition` -> the most records bronze was behind on it."""
    state_rows: int | None = None
    state_memory_bytes: int | None = None
    """Silver's state at its largest after a batch of the phase."""
    memory_bytes: int = 0
    """Peak resident memory of the pipeline's processes on this machine (its JVM, its
    Python workers): on a cluster its executors run elsewhere."""

    @property
    def floors(self) -> list[tuple[float, int]]:
        """The lag just after each of bronze's commits seen (a sample below the one before):
        the lag is a sawtooth, growing while a batch runs and falling as it commits, and its
        floor is what a pipeline that keeps up comes back to."""
        return [
            now for before, now in zip(self.lag, self.lag[1:], strict=False) if now[1] < before[1]
        ]

    @property
    def lag_growth(self) -> float | None:
        """Records a second by which the lag's floor rose over the phase (least squares);
        None for a phase of fewer than three commits, too few to tell a trend from where a
        sample fell in a batch."""
        floors = self.floors
        return slope(floors) if len(floors) >= MIN_FLOORS else None

    @property
    def kept_up(self) -> bool | None:
        """The lag's floor did not rise by more than a tenth of the rate; None: too short
        a phase to tell."""
        growth = self.lag_growth
        return None if growth is None else growth <= self.rate / 10

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "lag_growth": self.lag_growth, "kept_up": self.kept_up}


def slope(points: list[tuple[float, int]]) -> float:
    """Least squares slope of y over x; 0 for fewer than two points."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return 0.0 if var == 0 else sum((x - mx) * (y - my) for x, y in points) / var


def traffic_for(rate: float, seconds: float, **spec: Any) -> TrafficSpec:
    """About `rate * seconds` records in the shape `benchmarks.latency` sends (it calls this
    too, so that a load phase and the benchmark at the same rate send the same traffic):
    10 sensors of 4 partitions each, sessions of a 200-row snapshot then updates in
    sequence, about 1,000 records a session from 10,000 records on (one shorter session
    a sensor below). `spec`: the rest of the generator's spec (seed, first sensor, topic prefix)."""
    records = max(LOAD_SENSORS * 3, round(rate * seconds))
    sessions = max(1, round(records / (LOAD_SENSORS * SESSION_RECORDS)))
    return TrafficSpec(
        sensors=LOAD_SENSORS, sessions_per_sensor=sessions, rows_per_snapshot=200,
        # A session is its snapshot (one record), its updates and its end.
        updates_per_session=records // (LOAD_SENSORS * sessions) - 2,
        session_stagger_seconds=5, partitions=4, **spec,
    )  # fmt: skip


def run_at(
    spark: SparkSession,
    settings: Settings,
    rate: float,
    seconds: float,
    seed: int,
    wait_caught_up: Callable[[], float],
    pipeline_group: int | None = None,
) -> LoadRun:
    """Send at `rate` for about `seconds`, sampling Kafka's lag and the memory of the
    pipeline's process group every 2 s, then wait until the pipeline caught up and read
    the figures of the records sent."""
    run = LoadRun(rate, seconds)
    began, since = time.monotonic(), datetime.now(UTC)
    prefix, first = settings.kafka.topic_prefix, 1000 + seed * LOAD_SENSORS  # beside the steps'
    spec = traffic_for(rate, seconds, seed=seed, first_sensor=first, topic_prefix=prefix)
    sending = threading.Thread(
        target=lambda: setattr(
            run, "sent", produce(spec, settings.kafka.bootstrap_servers, rate=rate).records
        ),
        daemon=True,
    )
    sending.start()
    while sending.is_alive():
        if pipeline_group is not None:
            run.memory_bytes = max(run.memory_bytes, resident_bytes(pipeline_group))
        try:
            lags = status.kafka_lag(watermarks(settings), _read(spark, settings))
        except Exception:  # a broker's passing answer (a new topic's leader): no sample
            lags = []
        for p in lags:
            key = f"{p.topic}/{p.partition}"
            run.lag_by_partition[key] = max(run.lag_by_partition.get(key, 0), p.lag)
        if lags:
            run.lag.append((time.monotonic() - began, sum(p.lag for p in lags)))
        sending.join(2)
    wait_caught_up()
    run.to_silver, run.to_gold = latencies(spark, settings.storage.table_uri, since)
    read_progress(run, spark, settings.storage.table_uri, since)
    return run


def resident_bytes(group: int) -> int:
    """Resident memory of every process of process group `group`, from /proc (0 where
    there is none)."""
    total, page = 0, os.sysconf("SC_PAGE_SIZE")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after `pid (name)`
        except OSError:
            continue  # ended meanwhile
        if int(fields[2]) == group:  # pgrp; rss (pages) is the 24th field of the line
            total += int(fields[21]) * page
    return total


def _read(spark: SparkSession, settings: Settings) -> dict[tuple[str, int], int]:
    return positions.kafka_offsets(spark, settings.storage.checkpoint_uri("bronze.sensor_records"))


def latencies(
    spark: SparkSession, uri: Callable[[str], str], since: datetime
) -> tuple[Percentiles, Percentiles]:
    """Kafka timestamp → the silver commit that holds the record, and → the end of the first
    gold run that read that commit, for the records Kafka stamped after `since`."""
    kafka_time = (
        spark.read.format("delta").load(uri("bronze.sensor_records"))
        .where(F.col("kafka_timestamp") >= F.lit(since))
        .select("topic", "partition", "offset", "kafka_timestamp")
    )  # fmt: skip
    committed = (
        spark.read.format("delta").option("readChangeFeed", "true")
        .option("startingVersion", 0).load(uri("silver.row_changes"))
        .where(F.col("_change_type") == "insert")
        .groupBy("topic", "partition", "offset")
        .agg(F.min("_commit_timestamp").alias("at"), F.min("_commit_version").alias("version"))
        .join(kafka_time, ["topic", "partition", "offset"])
    )  # fmt: skip
    gold_runs = (
        spark.read.format("delta").load(uri("gold.model_runs"))
        .where(F.col("model") == "gold.sensor_hourly")
        .select(
            F.col("source_versions")["silver.row_changes"].alias("read_version"),
            (F.unix_micros("started_at") + (F.col("seconds") * 1e6).cast("long")).alias("ended"),
        )
    )  # fmt: skip
    in_gold = (
        committed.join(gold_runs, committed.version <= gold_runs.read_version)
        .groupBy("topic", "partition", "offset", "kafka_timestamp")
        .agg(F.min("ended").alias("ended"))
    )
    return seconds_between(committed, F.unix_micros("at")), seconds_between(in_gold, F.col("ended"))


def seconds_between(rows: DataFrame, end_micros: Column) -> Percentiles:
    latency = (end_micros - F.unix_micros("kafka_timestamp")) / 1e6
    found = rows.select(latency.alias("s")).agg(
        F.count("*"),
        F.percentile_approx("s", 0.5, 10_000),
        F.percentile_approx("s", 0.95, 10_000),
        F.max("s"),
    )
    count, p50, p95, worst = found.first() or (0, 0.0, 0.0, 0.0)
    return Percentiles(count, p50 or 0.0, p95 or 0.0, worst or 0.0)


def read_progress(
    run: LoadRun, spark: SparkSession, uri: Callable[[str], str], since: datetime
) -> None:
    """The streams' batches with input since `since`, from their progress tables
    (ops.progress): each one's median duration, and silver's state at its largest."""
    for node in ("bronze", "silver"):
        found = (
            spark.read.format("delta").load(uri(f"ops.{node}_progress"))
            .where((F.col("started_at") >= F.lit(since)) & (F.col("input_rows") > 0))
            .agg(F.percentile_approx("duration_ms", 0.5).alias("median_ms"),
                 F.max("state_rows").alias("rows"), F.max("state_memory_bytes").alias("bytes"))
            .first()
        )  # fmt: skip
        run.batch_ms[node] = float((found["median_ms"] if found else None) or 0)
        if node == "silver" and found is not None:
            run.state_rows, run.state_memory_bytes = found["rows"], found["bytes"]
