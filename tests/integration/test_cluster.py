"""Every job on a real Spark standalone cluster (two workers on 127.0.0.1) with every table
on a real S3 server: the same answers as one local process, and failures it survives."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from bronze import sensor_records
from lakehouse import PROJECT_ROOT
from lakehouse.definitions import MODELS
from lakehouse.gameday import reference
from lakehouse.ops.producer import produce
from lakehouse.runtime.incremental import run_models
from lakehouse.services.cluster import EmbeddedCluster
from lakehouse.services.s3 import EmbeddedS3
from silver import reconstruct
from tests.support import (
    S3_KEYS,
    command_lines_seen,
    lakehouse_command,
    overrides,
    run_lakehouse,
    settings_for,
    spark_log_of,
)
from tests.support.bronze_tables import kafka_records, write_bronze
from tests.support.s3 import COMPARED, PIPELINE, PREFIX, SPEC, comparable, read_s3, s3_env
from tests.support.silver import assert_matches, silver_tables, small_spec

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def started_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    home = tmp_path_factory.mktemp("cluster-state")
    cluster = EmbeddedCluster.under(home, workers=2, cores=1, memory="1g")
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def cluster(started_cluster: EmbeddedCluster) -> EmbeddedCluster:
    """The module's cluster with every worker up: a worker a test killed comes back here,
    before a test that needs it, rather than after the last test."""
    started_cluster.start()
    return started_cluster


def on_cluster(env: dict[str, str], cluster: EmbeddedCluster) -> dict[str, str]:
    """`env` with the local-cluster target: jobs on `cluster`, one core each."""
    return {
        **env,
        "LAKEHOUSE_TARGET": "local-cluster",
        "LAKEHOUSE__SPARK__MASTER": "embedded",
        "LAKEHOUSE__STORAGE__LOCAL_STATE": str(cluster.home.parent),
    }


def test_executors_get_the_project_only_as_the_zip_the_driver_ships(
    cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    imported = subprocess.run(
        [str(cluster.executor_python), "-c", "import lakehouse"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    libraries = subprocess.run(
        [str(cluster.executor_python), "-c", "import pyspark, pandas, pyarrow"], cwd=tmp_path
    )

    assert "No module named 'lakehouse'" in imported.stderr
    assert libraries.returncode == 0


def test_the_pipeline_on_the_cluster_with_s3_gives_the_same_tables_as_one_local_process(
    spark: SparkSession,
    kafka_bootstrap: str,
    s3: EmbeddedS3,
    cluster: EmbeddedCluster,
    tmp_path: Path,
) -> None:
    spec = replace(SPEC, seed=41, topic_prefix="cluster." + PREFIX)
    produce(spec, kafka_bootstrap)
    local = settings_for(tmp_path / "local", kafka_bootstrap, spec.topic_prefix)
    sensor_records.run(spark, local)
    reconstruct.run(spark, local)
    run_models(spark, local.storage, MODELS)
    env = on_cluster(s3_env(tmp_path / "on-cluster", kafka_bootstrap, s3), cluster)
    env["LAKEHOUSE__KAFKA__TOPIC_PREFIX"] = spec.topic_prefix

    with command_lines_seen() as command_lines:
        for command in PIPELINE:
            result = run_lakehouse(*command, env=env, timeout=600)
            assert result.returncode == 0, f"{command}: {result.stderr[-2000:]}"
    # Every process the pipeline started, the jobs' JVMs and the cluster's executors
    # included, was seen; none had the S3 secret on its command line for `ps` to show.
    assert any("spark.app.name=lakehouse-all" in line for line in command_lines)
    assert any("CoarseGrainedExecutorBackend" in line for line in command_lines)
    assert not [line for line in command_lines if S3_KEYS[1] in line]

    root = env["LAKEHOUSE__STORAGE__ROOT"]
    for name in COMPARED:
        on_s3 = read_s3(spark, s3, f"{root}/{name.replace('.', '/')}")
        on_disk = spark.read.format("delta").load(local.storage.table_uri(name))
        assertDataFrameEqual(comparable(on_s3), comparable(on_disk), checkRowOrder=False)
    usage = run_lakehouse("storage", "du", env=env)
    assert "checkpoint silver.sessions_stream" in usage.stdout
    assert "quality.check_expectation_results" in usage.stdout
    # The catalog is shared over the network: another application (this process's; the
    # SQL commands' own are test_sql.py's) finds the cluster's tables by name.
    summaries = read_s3(spark, s3, f"{root}/gold/session_summary").count()
    by_name = spark.sql("SELECT count(*) AS sessions FROM gold.session_summary").first()
    assert by_name is not None and by_name.sessions == summaries > 0
    # Each job ran on the cluster and held at most its spark.cores.max of one core, which
    # is what lets two applications run side by side on two one-core workers.
    held = {a["name"]: a["cores"] for a in cluster.applications()}
    assert {"lakehouse-all", "lakehouse-check"} <= set(held)
    assert all(int(cores) <= 1 for cores in held.values())  # type: ignore[call-overload]


@pytest.mark.faults
def test_a_worker_killed_mid_batch_is_replaced_by_another_executor_and_silver_stays_exact(
    spark: SparkSession, cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    # Local disk is shared by the workers of one machine: the tables stay on it here.
    env = on_cluster(overrides(tmp_path, "127.0.0.1:9", "sensors."), cluster)
    env.update(
        LAKEHOUSE__SILVER__MAX_FILES_PER_TRIGGER="1", LAKEHOUSE__QUALITY__VALIDATE_STREAMS="false"
    )
    s = settings_for(tmp_path, "127.0.0.1:9", "sensors.", quality__validate_streams="false")
    records = kafka_records(small_spec(51, {"gap": 1, "duplicate": 1}, sessions_per_sensor=3))
    bronze, rng, first = s.storage.table_uri("bronze.sensor_records"), random.Random(51), 20
    # A new checkpoint's first batch takes all of bronze: the batch to strike comes after.
    write_bronze(spark, bronze, records[:first], 1, rng)
    reconstruct.run(spark, s)
    # Three batches for the job: one to commit, one to strike, one after the strike.
    write_bronze(spark, bronze, records[first:], 3, rng)
    checkpoint = tmp_path / "lake" / "_checkpoints" / "silver" / "sessions_stream"
    log = tmp_path / "silver.log"  # a file, not a pipe nobody reads while the job runs
    job = subprocess.Popen(
        lakehouse_command("run", "silver"),
        env={**os.environ, **env},
        cwd=PROJECT_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )
    try:
        # The moment: the job's second batch has written its offsets and runs its tasks.
        deadline = time.monotonic() + 300
        while not (checkpoint / "offsets" / "2").exists():
            assert time.monotonic() < deadline and job.poll() is None, "no second batch"
            time.sleep(0.1)
        worker = cluster.busy_worker()
        assert worker is not None, "no worker runs the job's executor"
        os.killpg(worker, signal.SIGKILL)  # the worker and its executors, as a lost machine
        assert not (checkpoint / "commits" / "2").exists(), "batch 2 ended before the kill"
        job.wait(600)
    finally:
        job.kill()

    # As docs/operations.md says: the executor is replaced and the job goes on, no rerun.
    errors = log.read_text()
    assert job.returncode == 0, errors[-3000:]
    spark_log = spark_log_of(errors, job.pid)
    assert "Lost executor 0" in spark_log, spark_log[-3000:]  # the kill did take its executor
    expected = reference.reconstruct(
        [(t, p, o, v) for t, p, o, _, v in records], s.kafka.topic_prefix
    )
    assert_matches(silver_tables(spark, s), expected)
