"""`lakehouse gameday` end to end, beside a live lake: its broker stopped under its own
pipeline (PASS: nothing lost or doubled), then its lake tampered with during a long stop
(FAIL, naming the step and the records lost and doubled), and the live lake unchanged."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakehouse.core.settings import load_settings
from tests.support import overrides, start_lakehouse
from tests.support.bronze_tables import kafka_records, write_bronze
from tests.support.silver import small_spec

pytestmark = [pytest.mark.integration, pytest.mark.faults]

SCENARIO = """
name: tampered
traffic: {sensors: 2, sessions_per_sensor: 2, rows_per_snapshot: 5, updates_per_session: 20,
          resync_every: 8, faults: {gap: 1, duplicate: 1, malformed_json: 1}}
steps:
  - broker-stop: {seconds: 10}
  - long-stop: {seconds: 5}
load: null
"""


def files_and_versions(root: Path) -> dict[str, int]:
    """Every file under the live lake, by path, with its size."""
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def test_gameday_passes_a_broker_stop_and_fails_a_tampered_lake_naming_the_step(
    spark: SparkSession, tmp_path: Path
) -> None:
    env = overrides(tmp_path, "embedded", "live.sensors.")  # the project's broker: its own
    live = load_settings("local", environ=env)
    live_bronze = live.storage.table_uri("bronze.sensor_records")
    write_bronze(spark, live_bronze, kafka_records(small_spec(5, {})), 2, random.Random(5))
    lake = tmp_path / "lake"
    before = files_and_versions(lake)
    scenario = tmp_path / "tampered.yaml"
    scenario.write_text(SCENARIO)

    job = start_lakehouse("gameday", "--scenario", str(scenario), env=env)
    lines: list[str] = []
    tampered: list[int] = []  # the records of the bronze file deleted

    def read() -> None:
        assert job.stdout is not None
        for line in job.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("[2/2] long-stop"):
                tampered.append(tamper(spark, lake / "_gameday"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        code = job.wait(900)
    finally:
        job.kill()
    reader.join(10)
    text = "\n".join(lines)

    assert tampered and tampered[0] > 0, text
    assert code == 1, text
    assert "PASS broker-stop for 10 s: 0 lost, 0 doubled, recovered in" in text, text
    # Named: the step, the bronze file's records lost, the silver row change doubled.
    assert any(line.startswith("FAIL long-stop for 5 s: ") for line in lines), text
    bronze = next(line for line in lines if line.startswith("  kafka ↔ bronze: "))
    assert bronze.startswith(f"  kafka ↔ bronze: {tampered[0]} lost, 0 doubled"), bronze
    silver = next(line for line in lines if line.startswith("  bronze ↔ silver: "))
    assert _count(silver, "doubled") == 1, silver
    assert "game day FAILED: 1 passed, 1 failed: long-stop for 5 s" in text, text
    # The live lake as it was: no file added, changed or removed; the namespace gone.
    assert files_and_versions(lake) == before
    assert not (lake / "_gameday").exists()


def tamper(spark: SparkSession, namespaces: Path) -> int:
    """Between two steps: one committed bronze data file deleted, one silver row change
    appended again, as a faulty job or a person might; the records of the file."""
    time.sleep(3)  # the pipeline stopping after its batch
    [root] = list(namespaces.iterdir())
    # the oldest: silver read it in the step before, so only the reconciler can miss it
    files = (root / "bronze" / "sensor_records").rglob("part-*.parquet")
    bronze_file = min(files, key=lambda p: p.stat().st_mtime)
    records = spark.read.parquet(str(bronze_file)).count()
    bronze_file.unlink()
    changes = str(root / "silver" / "row_changes")
    one = spark.read.format("delta").load(changes).limit(1)
    one.write.format("delta").mode("append").save(changes)
    return records


def _count(line: str, what: str) -> int:
    return int(line.split(f" {what}")[0].rsplit(" ", 1)[1])
