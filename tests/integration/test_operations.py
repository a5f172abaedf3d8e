"""Operating the pipeline through the CLI with a real broker, Spark and Delta: `lakehouse
status` (Kafka lag while bronze is stopped, freshness and its exit codes), the progress
every batch leaves in `ops.progress`, and the Prometheus metrics a continuous run serves."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bronze import sensor_records
from lakehouse.core.settings import Settings
from lakehouse.ops.producer import TrafficSpec, generate_traffic, produce
from lakehouse.ops.status import changed_rows
from lakehouse.ops.status import status as lakehouse_status
from lakehouse.services import process
from lakehouse.storage import catalog
from lakehouse.storage.delta import history_since
from tests.support import foreign_lines, overrides, run_lakehouse, settings_for, start_lakehouse

pytestmark = pytest.mark.integration

PREFIX = "ops.sensors."


def traffic(seed: int, first_sensor: int = 1) -> TrafficSpec:
    return TrafficSpec(
        seed=seed,
        sensors=2,
        first_sensor=first_sensor,
        sessions_per_sensor=1,
        rows_per_snapshot=10,
        updates_per_session=40,
        partitions=2,
        topic_prefix=PREFIX,
    )


def by_partition(spec: TrafficSpec) -> Counter[str]:
    """Records the spec sends to each topic/partition."""
    return Counter(f"{r.topic}/{r.partition}" for r in generate_traffic(spec))


def freshness_rule(warn: float, error: float) -> str:
    """`status.freshness` as an environment value: bronze by its Kafka timestamps only."""
    return json.dumps(
        [
            {
                "table": "bronze.sensor_records",
                "column": "kafka_timestamp",
                "warn_after_seconds": warn,
                "error_after_seconds": error,
            }
        ]
    )


def cli(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """A CLI run whose console must hold the project's lines only."""
    result = run_lakehouse(*args, env=env, timeout=timeout)
    assert not foreign_lines(result.stdout + result.stderr), (args, result.stdout, result.stderr)
    return result


LAG_WARNS = {
    # any record bronze has not read warns, and so does a stream with input waiting
    "LAKEHOUSE__STATUS__KAFKA_LAG__WARN_RECORDS": "0",
    "LAKEHOUSE__STATUS__KAFKA_LAG__ERROR_RECORDS": "1000000",
    "LAKEHOUSE__STATUS__STALLED__WARN_AFTER_SECONDS": "0",
    "LAKEHOUSE__STATUS__STALLED__ERROR_AFTER_SECONDS": "3600",
}


def status(env: dict[str, str], warn: float, error: float) -> tuple[int, dict[str, Any]]:
    rules = {"LAKEHOUSE__STATUS__FRESHNESS": freshness_rule(warn, error), **LAG_WARNS}
    result = cli("status", "--json", env={**env, **rules}, timeout=180)
    assert result.returncode in (0, 1, 2), result.stderr[-3000:]
    document = result.stdout[result.stdout.index("{") : result.stdout.rindex("}") + 1]
    return result.returncode, json.loads(document)


@pytest.fixture(scope="module")
def lake(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, str], Settings, Path]:
    root = tmp_path_factory.mktemp("ops")
    env = overrides(root, kafka_bootstrap, PREFIX, bronze__trigger_interval="1 second")
    return env, settings_for(root, kafka_bootstrap, PREFIX), root


def test_status_reports_the_true_kafka_lag_while_bronze_is_stopped_and_freshness_exit_codes(
    lake: tuple[dict[str, str], Settings, Path], kafka_bootstrap: str, spark: SparkSession
) -> None:
    env, settings, root = lake
    first, second = traffic(seed=41), traffic(seed=42, first_sensor=2)
    produce(first, kafka_bootstrap)
    # bronze's runs in this process's Spark (a CLI run costs a JVM): the claims are about
    # `status`; `run bronze`'s console is the next test's.
    sensor_records.run(spark, settings)

    # bronze is stopped; traffic goes on, to a topic it read and to one it never saw
    produce(second, kafka_bootstrap)
    code, found = status(env, warn=0, error=7200)  # any age is past warn_after
    lag = {f"{p['topic']}/{p['partition']}": p["lag"] for p in found["kafka"]}
    expected = by_partition(second)
    assert {k: v for k, v in lag.items() if v} == dict(expected)
    assert sum(lag.values()) == sum(1 for _ in generate_traffic(second))
    assert code == 1 and found["level"] == "warn"
    assert found["freshness"][0]["level"] == "warn"
    (bronze,) = found["streams"]
    assert bronze["node"] == "bronze" and bronze["input_rows"] > 0
    behind = {t["topic"]: t for t in found["topics"] if t["lag"]}
    assert {t: v["lag"] for t, v in behind.items()} == Counter(
        r.topic for r in generate_traffic(second)
    )
    assert all(t["level"] == "warn" and 0 < t["seconds_behind"] < 600 for t in behind.values())
    lagging = {f"{p['topic']}/{p['partition']}" for t in behind.values() for p in t["lagging"]}
    assert lagging == set(expected)
    (stalled,) = found["stalls"]  # silver, never started here, has no position to be behind
    assert stalled["stream"] == "bronze" and stalled["level"] == "warn"
    assert stalled["seconds_since_batch"] > 0
    assert stalled["waiting"] == f"{sum(expected.values()):,} Kafka records"

    sensor_records.run(spark, settings)
    code, found = status(env, warn=0, error=0)  # ... and past error_after
    assert [p["lag"] for p in found["kafka"]] == [0] * len(found["kafka"])
    assert {t["level"] for t in found["topics"]} == {"ok"} and found["stalls"] == []
    assert code == 2 and found["freshness"][0]["level"] == "error"
    # the newest record is seconds old: rules of an hour hold it fresh (exit 0)
    hourly = settings_for(
        root, kafka_bootstrap, PREFIX, status__freshness=freshness_rule(3600, 7200)
    )
    fresh = lakehouse_status(spark, hourly)
    assert fresh.exit_code == 0 and fresh.freshness[0].age_seconds < 600

    # what status read is what the batches of both runs recorded: every record, once
    recorded = spark.read.format("delta").load(settings.storage.table_uri("ops.bronze_progress"))
    total = recorded.agg(F.sum("input_rows")).collect()[0][0]
    everything = by_partition(first) + by_partition(second)
    assert total == sum(everything.values())


def scrape(port: int) -> dict[str, float]:
    """The metrics endpoint's samples: `name{labels}` -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def test_a_continuous_run_serves_metrics_that_match_its_progress_table(
    lake: tuple[dict[str, str], Settings, Path], kafka_bootstrap: str, spark: SparkSession
) -> None:
    env, settings, _ = lake
    port = process.free_port()
    served = {**env, "LAKEHOUSE__METRICS__ENABLED": "true", "LAKEHOUSE__METRICS__PORT": str(port)}
    uri = settings.storage.table_uri("ops.bronze_progress")
    earlier = ["none"]  # the runs of bronze before this one, whose rows are not this run's
    if catalog.is_delta(spark, uri):
        earlier += [r.run_id for r in spark.read.format("delta").load(uri).collect()]
    job = start_lakehouse("run", "bronze", "--continuous", env=served)
    try:
        more = traffic(seed=43)
        produce(more, kafka_bootstrap)
        sent = sum(1 for _ in generate_traffic(more))
        rows, deadline = 'lakehouse_input_rows_total{node="bronze"}', time.monotonic() + 180
        samples: dict[str, float] = {}
        while samples.get(rows) != sent:
            assert job.poll() is None, job.communicate()[0][-3000:]
            assert time.monotonic() < deadline, samples
            time.sleep(1)
            try:
                samples = scrape(port)
            except OSError:
                continue
        # the progress table catches up with what was scraped (it is appended every 10 s)
        table = spark.read.format("delta").load(uri)
        while True:
            this_run = table.where(~F.col("run_id").isin(*earlier)).orderBy("batch_id").collect()
            if sum(r.input_rows for r in this_run) == sent:
                break
            assert time.monotonic() < deadline, this_run
            time.sleep(2)
        assert samples['lakehouse_batches_total{node="bronze"}'] == len(this_run)
        assert samples['lakehouse_last_batch_id{node="bronze"}'] == this_run[-1].batch_id
        last = this_run[-1]
        assert samples['lakehouse_batch_duration_seconds{node="bronze"}'] == pytest.approx(
            last.duration_ms / 1000
        )
        for where, behind in last.kafka_offsets_behind.items():
            topic, partition = where.rsplit("/", 1)
            key = f'lakehouse_kafka_offsets_behind{{partition="{partition}",topic="{topic}"}}'
            assert samples[key] == behind == 0
        written = 'lakehouse_rows_written_total{node="bronze",table="bronze.sensor_records"}'
        assert samples[written] == sent
    finally:
        job.send_signal(signal.SIGTERM)
        output, _ = job.communicate(timeout=120)
    assert job.returncode == 0, output[-3000:]
    assert not foreign_lines(output), output
    assert re.search(r"metrics for Prometheus: http://127\.0\.0\.1:\d+/metrics", output)


def test_a_readers_unread_commits_are_read_alone_and_all_of_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    uri = (tmp_path / "t").as_uri()
    for n in range(6):  # versions 0..5, each of n + 1 rows
        spark.range(n + 1).write.format("delta").mode("append").save(uri)

    found = history_since(spark, uri, 3)

    assert [(h["version"], changed_rows(h["operation"], h["operationMetrics"])) for h in found] == [
        (5, 6),
        (4, 5),
        (3, 4),
    ]
    assert history_since(spark, uri, 6) == []  # nothing unread
    assert [h["version"] for h in history_since(spark, uri, 0)] == [5, 4, 3, 2, 1, 0]
    assert history_since(spark, (tmp_path / "none").as_uri(), 0) == []
