"""Tables on a real S3 server: streams that compact their own tables while writing give
the same answers as on local disk, one writer per table, and a table's folder left without
its first commit made the table. The whole pipeline on S3 against local disk is
`test_cluster.py`'s, on the cluster it needs anyway."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from bronze import sensor_records
from lakehouse import PROJECT_ROOT
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings, load_settings
from lakehouse.definitions import MODELS, STREAMS, run_stream
from lakehouse.ops.producer import produce
from lakehouse.services.s3 import EmbeddedS3
from lakehouse.storage import catalog, delta
from silver import reconstruct, violations
from tests.support import lakehouse_command, run_lakehouse, settings_for, start_lakehouse
from tests.support.s3 import (
    COMPARED,
    FAIL_FAST,
    PREFIX,
    SPEC,
    comparable,
    read_s3,
    s3_env,
    table_version,
    use_s3,
)

pytestmark = pytest.mark.integration

WRITTEN_BY_STREAMS = [name for name in COMPARED if not name.startswith("gold.")]


def test_a_second_writer_of_a_leased_table_is_refused_and_changes_nothing(
    spark: SparkSession, kafka_bootstrap: str, s3: EmbeddedS3, tmp_path: Path
) -> None:
    produce(replace(SPEC, seed=32, faults={}), kafka_bootstrap)
    env = s3_env(tmp_path, kafka_bootstrap, s3, bronze__trigger_interval="1 second")
    table = f"{env['LAKEHOUSE__STORAGE__ROOT']}/bronze/sensor_records"
    first = start_lakehouse("run", "bronze", "--continuous", env=env)
    try:
        deadline = time.monotonic() + 180
        assert first.stdout is not None
        while "batch 0 wrote" not in first.stdout.readline():
            assert time.monotonic() < deadline and first.poll() is None, "no first batch"
        versions = read_s3(spark, s3, table).count(), table_version(spark, s3, table)

        for second in (("run", "bronze"), ("compact", "bronze.sensor_records")):
            refused = run_lakehouse(*second, env=env)
            assert refused.returncode == 1, refused.stdout + refused.stderr
            last = refused.stderr.strip().splitlines()[-1]
            assert last.startswith("lakehouse: error: bronze.sensor_records is leased to the ")
            assert "bronze stream@" in last and "one writer per table" in last

        assert (read_s3(spark, s3, table).count(), table_version(spark, s3, table)) == versions
    finally:
        first.send_signal(signal.SIGINT)
        first.wait(60)


def test_lakehouse_storage_init_refuses_a_bucket_it_cannot_reach(
    s3: EmbeddedS3, tmp_path: Path
) -> None:
    env = s3_env(tmp_path, "127.0.0.1:9", s3, s3__secret_key="not-the-secret")

    result = run_lakehouse("storage", "init", env=env)

    assert result.returncode == 1
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith("lakehouse: error: cannot reach bucket lake: ")
    )


def test_table_folders_left_without_a_first_commit_on_s3_become_the_tables_on_the_next_run(
    spark: SparkSession, s3: EmbeddedS3, tmp_path: Path
) -> None:
    staged, emptied = _folders_without_a_commit(spark, s3, tmp_path)

    summary = next(m.table for m in MODELS if m.name == "gold.session_summary")  # clustered
    for spec, location in ((summary, staged), (violations.TABLE, emptied)):
        delta.create(spark, spec, location)

        # The table its CREATE makes on a new folder: NOT NULL, comments, clustering and all.
        table = spark.read.format("delta").load(location)
        assert table.schema == spark.createDataFrame([], spec.columns).schema
        detail = spark.sql(f"DESCRIBE DETAIL delta.`{location}`").first()
        assert detail is not None
        assert tuple(detail["clusteringColumns"]) == spec.cluster_by
        assert spec.table_properties.items() <= detail["properties"].items()


def test_a_create_that_leaves_no_commit_fails_in_one_line_naming_the_folder(
    spark: SparkSession, s3: EmbeddedS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, emptied = _folders_without_a_commit(spark, s3, tmp_path)
    monkeypatch.setattr(delta, "_first_commit_aside", lambda *_: None)  # Delta's CREATE alone

    with pytest.raises(LakehouseError) as refused:
        delta.create(spark, violations.TABLE, emptied)

    assert str(refused.value) == (
        f"silver.violations: creating the table at {emptied} left no commit in its "
        "_delta_log folder"
    )


def _folders_without_a_commit(
    spark: SparkSession, server: EmbeddedS3, tmp_path: Path
) -> tuple[str, str]:
    """Two table folders with no commit: what a job killed inside Delta's create leaves
    (`_delta_log/_staged_commits`), and that cleared by hand, which SeaweedFS lists on.
    Later versions' folders, as the shadow makes them: no name points at them, so nothing
    but their own log says whether they are tables."""
    use_s3(spark, server)
    root = f"s3a://lake/{tmp_path.parent.name}/{tmp_path.name}"
    staged, emptied = f"{root}/gold/session_summary__v2", f"{root}/silver/violations__v2"
    for location in (staged, emptied):
        fs, folder = catalog.hadoop_fs(spark, f"{location}/_delta_log/_staged_commits")
        fs.mkdirs(folder)
    fs, log = catalog.hadoop_fs(spark, f"{emptied}/_delta_log")
    fs.delete(log, True)
    return staged, emptied


def test_streams_compact_their_own_tables_and_outlive_an_outage_on_s3_every_table_exact(
    spark: SparkSession, kafka_bootstrap: str, s3: EmbeddedS3, tmp_path: Path
) -> None:
    prefix = "compact." + PREFIX
    produce(replace(SPEC, seed=34, topic_prefix=prefix), kafka_bootstrap)
    local = settings_for(tmp_path / "local", kafka_bootstrap, prefix)
    ingested = _local_reference(spark, local)
    env = s3_env(tmp_path / "on-s3", kafka_bootstrap, s3, **SMALL_BATCHES_COMPACTED_OFTEN,
                 kafka__topic_prefix=prefix)  # fmt: skip
    root = env["LAKEHOUSE__STORAGE__ROOT"]
    bronze_on_s3 = f"{root}/bronze/sensor_records"
    output = tmp_path / "all.out"
    # Both streams in one application, as deployed; gold's schedule is not what is tested.
    job = subprocess.Popen(
        lakehouse_command("run", "all", "--continuous"),
        env={**os.environ, **env, "LAKEHOUSE__GOLD__EVERY_SECONDS": "3600"},
        cwd=PROJECT_ROOT,
        stdout=output.open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        _until(
            lambda: _bronze_holds(spark, s3, bronze_on_s3, ingested)
            and "silver.row_changes: compacting" in output.read_text(),
            job, output, "bronze ingested not all, or silver compacted not",
        )  # fmt: skip
        refused = run_lakehouse("compact", "silver.row_changes", env=env)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "leased to the silver stream@" in refused.stderr
        assert "compacts the tables it writes itself" in refused.stderr

        # S3 down under the running pipeline, new traffic to new topics meanwhile, until
        # each part has failed on it and could not release its leases (not a sleep: an
        # idle bronze does not touch S3); restarted, it takes them back (no other writer
        # holds them) and goes on.
        s3.stop()
        produce(replace(SPEC, seed=35, first_sensor=3, topic_prefix=prefix), kafka_bootstrap)
        _until(lambda: all(_restarted(output.read_text(), part) for part in PARTS), job,
               output, "a part did not fail while S3 was down")  # fmt: skip
        s3.start()
        ingested = _local_reference(spark, local)
        _until(lambda: _bronze_holds(spark, s3, bronze_on_s3, ingested), job, output,
               "bronze did not go on after the outage")  # fmt: skip
    finally:
        job.send_signal(signal.SIGINT)
        job.wait(120)
    assert job.returncode == 0, output.read_text()[-3000:]
    # What its last batch left, in batches of any size: silver's answer does not depend
    # on how bronze is cut into them. Finished by `run silver`'s job (compacting as it goes)
    # in this process's Spark: the claim is where the tables end, not the command.
    use_s3(spark, s3)
    whole = {**env, "LAKEHOUSE__SILVER__MAX_FILES_PER_TRIGGER": "1000"}
    run_stream(spark, load_settings("local", environ=whole), STREAMS["silver"])
    for name in WRITTEN_BY_STREAMS:
        on_s3 = read_s3(spark, s3, f"{root}/{name.replace('.', '/')}")
        on_disk = spark.read.format("delta").load(local.storage.table_uri(name))
        assertDataFrameEqual(comparable(on_s3), comparable(on_disk), checkRowOrder=False)
    _assert_compacted_by_their_streams(spark, root)


PARTS = ("bronze", "silver")
"""The streams of `run all`, each restarted on its own when it fails."""

SMALL_BATCHES_COMPACTED_OFTEN = {
    "spark__conf": FAIL_FAST,
    "bronze__trigger_interval": "1 second",
    "bronze__max_offsets_per_trigger": "60",
    "silver__trigger_interval": "1 second",
    "silver__max_files_per_trigger": "1",
    "compact__stream_every_batches": "2",
}


def _restarted(output: str, part: str) -> bool:
    """Whether `part` of a supervised run failed on storage that did not answer, and was
    restarted."""
    return any(
        line.startswith(f"{part}: ") and "did not answer" in line and "; restarting in " in line
        for line in output.splitlines()
    )


def _local_reference(spark: SparkSession, local: Settings) -> int:
    """Bronze and silver on local disk, from what Kafka holds now: bronze's record count."""
    sensor_records.run(spark, local)
    reconstruct.run(spark, local)
    return spark.read.format("delta").load(local.storage.table_uri(sensor_records.NAME)).count()


def _until(
    condition: Callable[[], bool], job: subprocess.Popen[bytes], output: Path, what: str
) -> None:
    """Poll `condition` while the job runs, for at most 5 minutes."""
    deadline = time.monotonic() + 300
    while not condition():
        assert time.monotonic() < deadline, what
        assert job.poll() is None, output.read_text()[-3000:]
        time.sleep(2)


def _assert_compacted_by_their_streams(spark: SparkSession, root: str) -> None:
    for name in ("bronze.sensor_records", "silver.row_changes"):
        history = spark.sql(f"DESCRIBE HISTORY delta.`{root}/{name.replace('.', '/')}`")
        operations = {r["version"]: r["operation"] for r in history.collect()}
        compacted = [v for v, op in operations.items() if op == "OPTIMIZE"]
        assert compacted, operations
        # Compacted by its stream between batches it went on writing, not only at the end:
        # bronze compacted before the outage and wrote the second traffic after it (when
        # silver's last write falls after the outage depends on timing).
        assert name != "bronze.sensor_records" or any(
            op == "WRITE" and v > min(compacted) for v, op in operations.items()
        ), operations


def _bronze_holds(spark: SparkSession, server: EmbeddedS3, uri: str, records: int) -> bool:
    try:
        return read_s3(spark, server, uri).count() == records
    except AnalysisException:  # no first commit yet
        return False
