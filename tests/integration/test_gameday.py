"""`lakehouse gameday` end to end, beside a live lake: its broker stopped under its own
pipeline (PASS: nothing lost or doubled), then its lake tampered with during a long stop
(FAIL, naming the step, the records lost though the lake says Kafka lost them, a silver
row doubled and a value altered), and the live lake unchanged."""

from __future__ import annotations

import random
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse

import pytest
from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bronze import kafka_changes
from lakehouse.core.settings import load_settings
from tests.support import overrides, start_lakehouse
from tests.support.bronze_tables import kafka_records, write_bronze
from tests.support.silver import small_spec

pytestmark = [pytest.mark.integration, pytest.mark.faults]

SCENARIO = """
name: tampered
traffic: {sensors: 2, sessions_per_sensor: 2, rows_per_snapshot: 5, updates_per_session: 20,
          resync_every: 8, faults: {gap: 1, duplicate: 1, malformed_json: 1, null_key: 1}}
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
    tampered: list[dict[str, object]] = []

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

    assert tampered, text
    done = tampered[0]
    assert code == 1, text
    assert "PASS broker-stop for 10 s: 0 lost, 0 doubled, recovered in" in text, text
    # Named: the step; the bronze file's records lost, though the lake's own record says
    # Kafka lost them; the silver row doubled and the row change altered, with their keys.
    assert any(line.startswith("FAIL long-stop for 5 s: ") for line in lines), text
    bronze = next(line for line in lines if line.startswith("  kafka ↔ bronze: "))
    assert bronze.startswith(f"  kafka ↔ bronze: {done['records']} lost, 0 doubled"), bronze
    assert "accepted" not in bronze, bronze
    silver = next(line for line in lines if line.startswith("  bronze ↔ silver: "))
    assert (_count(silver, "lost"), _count(silver, "doubled")) == (0, 1), silver
    assert _count(silver, "altered") == 1, silver
    assert f"{done['doubled']}; {done['altered']}" in silver, silver
    assert "game day FAILED: 1 passed, 1 failed: long-stop for 5 s" in text, text
    # The live lake as it was: no file added, changed or removed; the namespace gone.
    assert files_and_versions(lake) == before
    assert not (lake / "_gameday").exists()


def tamper(spark: SparkSession, namespaces: Path) -> dict[str, object]:
    """Between two steps, as a faulty job or a person might: one committed file of bronze's
    quarantine deleted and its offsets recorded as lost in Kafka (it lost none), one
    `silver.session_rows` row appended again, one temperature of `silver.row_changes`
    changed. What was done, to be named."""
    time.sleep(3)  # the pipeline stopping after its batch
    [root] = list(namespaces.iterdir())
    # Bronze's quarantine (keyless records), which the pipeline only appends to: a file of
    # the data files silver reads would stop it at its next lookup of a record's bytes.
    quarantine = spark.read.format("delta").load(str(root / "bronze" / "quarantine"))
    parts = quarantine.groupBy(F.col("_metadata.file_path").alias("file"), "topic", "partition")
    found = parts.agg(F.min("offset"), F.max("offset"), F.count("*").alias("n")).collect()
    deleted = min({r.file for r in found}, key=lambda f: Path(urlparse(f).path).stat().st_mtime)
    ranges = [r[1:5] for r in found if r.file == deleted]
    Path(urlparse(deleted).path).unlink()
    changes = str(root / "bronze" / "kafka_changes")  # made by the first accepted change
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS delta.`{changes}` ({kafka_changes.TABLE.columns}) USING delta"
    )
    schema = spark.read.format("delta").load(changes).schema
    now = datetime.now(UTC)
    claimed = [("offsets_lost", t, p, a, b, b + 1, 1, 0, "elsewhere", "x", now, "tampered")
               for t, p, a, b in ranges]  # fmt: skip
    spark.createDataFrame(claimed, schema).write.format("delta").mode("append").save(changes)

    rows = str(root / "silver" / "session_rows")
    doubled = spark.read.format("delta").load(rows).orderBy("topic", "session_id", "row_id")
    doubled.limit(1).write.format("delta").mode("append").save(rows)
    [d] = doubled.limit(1).collect()
    table = DeltaTable.forPath(spark, str(root / "silver" / "row_changes"))
    [c] = table.toDF().where("op = 'update'").orderBy("offset", "ordinal").limit(1).collect()
    where = (
        f"topic = '{c.topic}' AND session_id = '{c.session_id}' AND row_id = '{c.row_id}'"
        f" AND seq = {c.seq}"
    )
    table.update(where, {"temperature": F.col("temperature") + 1})
    return {
        "records": sum(r.n for r in found if r.file == deleted),
        "doubled": f"doubled session_rows {((d.topic, d.session_id), d.row_id)}",
        "altered": f"altered row_changes {((c.topic, c.session_id), c.row_id, c.op, c.seq)}",
    }


def _count(line: str, what: str) -> int:
    return int(line.split(f" {what}")[0].rsplit(" ", 1)[1])
