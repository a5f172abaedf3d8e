"""`lakehouse compact` on real Delta tables: same answers, fewer files, a VACUUM that
waits for lagging readers, and streams that keep running through it."""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings
from lakehouse.definitions import MODELS, READERS
from lakehouse.gameday import reference
from lakehouse.ops.producer import TrafficSpec, generate_traffic, produce
from lakehouse.runtime.incremental import run_models
from lakehouse.storage import catalog, delta
from lakehouse.storage.compaction import compact, snapshot, storage
from silver import reconstruct
from tests.support import overrides, settings_for, start_lakehouse
from tests.support.gold import BASE, INCREMENTS, Bronze
from tests.support.silver import assert_matches, silver_tables

pytestmark = pytest.mark.integration


def contents(spark: SparkSession, s: Settings) -> dict[str, list[str]]:
    """Every table of the lake, row for row."""
    return {
        name: sorted(spark.read.format("delta").load(location).toJSON().collect())
        for name, location in catalog.lake_tables(spark, s.storage.root).items()
    }


@pytest.fixture(scope="module")
def small_files_lake(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Streams and incremental gold runs leave a few small files per batch and run."""
    root = tmp_path_factory.mktemp("compact")
    s = settings_for(
        root,
        "127.0.0.1:9",
        "sensors.",
        silver__max_files_per_trigger="2",
        quality__validate_streams="false",
        compact__min_retention_hours="0",
    )
    bronze = Bronze(spark, s.storage.table_uri("bronze.sensor_records"))
    for spec in INCREMENTS[:2]:
        for sensor in range(2):  # one commit per sensor: several files for silver to read
            bronze.append(replace(spec, sensors=1, first_sensor=sensor + 1))
        reconstruct.run(spark, s)
        run_models(spark, s.storage, MODELS)
    return s


def test_compaction_keeps_every_answer_and_leaves_fewer_files(
    spark: SparkSession, small_files_lake: Settings
) -> None:
    s = small_files_lake
    before = contents(spark, s)
    tables = catalog.lake_tables(spark, s.storage.root)
    bronze = tables["bronze.sensor_records"]
    bronze_storage = storage(spark, bronze)

    results = {r.table: r for r in compact(spark, s, READERS, retention_hours=0)}

    assert contents(spark, s) == before
    assert set(results) == set(tables)
    for r in results.values():
        assert r.snapshot_after.files <= max(1, r.snapshot_before.files)
        assert r.snapshot_after == snapshot(spark, tables[r.table])
    fragmented = [r for r in results.values() if r.snapshot_before.files > 1]
    assert {"bronze.sensor_records", "silver.row_changes", "gold.sensor_hourly"} <= {
        r.table for r in fragmented
    }
    assert all(r.snapshot_after.files == 1 for r in fragmented)
    # VACUUM with nobody lagging removed the files the compacted versions replaced.
    assert bronze_storage.files > 1
    assert storage(spark, bronze) == results["bronze.sensor_records"].snapshot_after


def test_vacuum_refuses_a_retention_a_lagging_reader_would_lose_data_by(
    spark: SparkSession, small_files_lake: Settings
) -> None:
    s = small_files_lake
    bronze = Bronze(spark, s.storage.table_uri("bronze.sensor_records"))
    bronze.next_offset.update({("sensors.sensor-001", p): 10_000 for p in range(2)})
    bronze.append(replace(BASE, seed=9, sensors=1, sessions_per_sensor=1))
    reconstruct.run(spark, s)  # silver moves on; gold has not read it yet
    tables = catalog.lake_tables(spark, s.storage.root)
    files = {name: snapshot(spark, location) for name, location in tables.items()}

    with pytest.raises(
        LakehouseError,
        match=r"refusing to VACUUM silver\.\w+ .*: gold\.\w+ has "
        r"not read its versions from \d+ on.*nothing was compacted",
    ):
        compact(spark, s, READERS, retention_hours=0)

    assert {name: snapshot(spark, location) for name, location in tables.items()} == files
    run_models(spark, s.storage, MODELS)
    assert compact(spark, s, READERS, ["silver.row_changes"], retention_hours=0)


def test_vacuum_deletes_what_is_older_than_the_configured_retention_and_keeps_the_rest(
    spark: SparkSession, tmp_path: Path
) -> None:
    # Delta 4.4 ignores a RETAIN other than 0 by default and keeps 7 days: files of 3 and of
    # 1 hour would then both stay.
    s = settings_for(tmp_path, "127.0.0.1:9", "sensors.")
    location = s.storage.table_uri("gold.vacuum_probe")
    spark.range(3).write.format("delta").save(location)
    folder = Path(location.removeprefix("file://"))
    old, young = folder / "part-old.parquet", folder / "part-young.parquet"
    for path, hours in ((old, 3), (young, 1)):
        path.write_bytes(b"not referenced by any version")
        aged = time.time() - hours * 3600
        os.utime(path, (aged, aged))

    compact(spark, s, (), ["gold.vacuum_probe"], retention_hours=2)

    assert not old.exists() and young.exists()
    assert spark.read.format("delta").load(location).count() == 3


def test_a_merge_that_compaction_commits_under_is_retried_and_applied_once(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The MERGE is held inside its transaction (its one-task source blocks on its first
    # read) while OPTIMIZE rewrites the files it read: the conflict is certain, not a matter
    # of timing. One task, so that OPTIMIZE has the session's other core.
    location, started, go = str(tmp_path / "t"), tmp_path / "started", tmp_path / "go"
    spark.range(0, 100, numPartitions=4).selectExpr("id", "0 AS n").write.format("delta").save(
        location
    )

    def held(i: int) -> int:
        if not go.exists():
            started.touch()
            while not go.exists():
                time.sleep(0.05)
        return i

    source = spark.range(0, 10, numPartitions=1)
    rows = source.select(F.udf(held, "bigint")("id").alias("id"), F.lit(1).alias("n"))
    txn = delta.Txn("forced-conflict", 7)  # as a stream's batch writes it
    merging = threading.Thread(target=delta.merge, args=(rows, location, ["id"], txn))
    merging.start()
    try:
        _wait(started.exists, "the MERGE to read its source")
        spark.sql(f"OPTIMIZE delta.`{location}`")
    finally:
        go.touch()  # never leave the session's core held, whatever failed
        merging.join(120)

    assert f"{location}: a concurrent commit conflicted" in capsys.readouterr().out
    history = spark.sql(f"DESCRIBE HISTORY delta.`{location}`").collect()
    assert [r["operation"] for r in history][:2] == ["MERGE", "OPTIMIZE"]  # the retry last
    delta.merge(rows, location, ["id"], txn)  # the batch replayed: its transaction is known
    assert spark.sql(f"DESCRIBE HISTORY delta.`{location}`").count() == len(history)
    counts = spark.read.format("delta").load(location).groupBy("n").count().collect()
    assert {r["n"]: r["count"] for r in counts} == {0: 90, 1: 10}


def test_compaction_while_bronze_and_silver_streams_write_fails_neither(
    spark: SparkSession, kafka_bootstrap: str, tmp_path: Path
) -> None:
    # Whether a conflict comes up here depends on timing: this shows that streams run on
    # beside compaction; the test above forces the conflict and its retry.
    prefix = "compaction.sensors."
    env = overrides(
        tmp_path,
        kafka_bootstrap,
        prefix,
        bronze__trigger_interval="1 second",
        silver__trigger_interval="1 second",
        silver__max_files_per_trigger="2",
        quality__validate_streams="false",
        gold__every_seconds="3600",  # gold's schedule is not what is tested
    )
    s = settings_for(tmp_path, kafka_bootstrap, prefix)
    spec = TrafficSpec(
        seed=4,
        sensors=2,
        sessions_per_sensor=4,
        rows_per_snapshot=20,
        updates_per_session=80,
        topic_prefix=prefix,
        partitions=2,
    )
    sent = produce(spec, kafka_bootstrap).records
    # Both streams in one application, as deployed (one JVM less than a run of each).
    job = start_lakehouse("run", "all", "--continuous", env=env)
    try:
        commits = tmp_path / "lake" / "_checkpoints" / "silver" / "sessions_stream" / "commits"
        _wait(lambda: commits.exists() and any(commits.glob("[0-9]*")), "silver's first batch")
        # More traffic while compacting, so that both streams commit during it.
        more = replace(spec, seed=5, first_sensor=3)
        producer = threading.Thread(
            target=produce, args=(more, kafka_bootstrap), kwargs={"rate": 250}
        )
        producer.start()
        compactions = [compact(spark, s, READERS, echo=lambda _: None) for _ in range(2)]
        producer.join()
        bronze = s.storage.table_uri("bronze.sensor_records")
        expected = sent + sum(1 for _ in generate_traffic(more))
        _wait(lambda: spark.read.format("delta").load(bronze).count() == expected, "bronze")
    finally:
        job.send_signal(signal.SIGTERM)
        output, _ = job.communicate(timeout=120)

    assert job.returncode == 0, f"a stream failed: {output[-2000:]}"
    assert any(r.snapshot_before.files > 1 for c in compactions for r in c)
    # Whatever silver had not read when it stopped, then: the tables still equal a plain
    # reconstruction of everything bronze holds.
    reconstruct.run(spark, replace(s, quality=replace(s.quality, validate_streams=False)))
    admitted = spark.read.format("delta").load(bronze).collect()
    expected_silver = reference.reconstruct(
        [(r.topic, r.partition, r.offset, bytes(r.value)) for r in admitted], s.kafka.topic_prefix
    )
    assert_matches(silver_tables(spark, s), expected_silver)


def _wait(done, what: str, timeout_s: float = 240) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)
