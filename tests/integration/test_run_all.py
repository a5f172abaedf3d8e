"""`lakehouse run all --continuous`: the streams and gold's schedule in one application,
stopped for good by a `fail` expectation, and its parts starting side by side on new lakes,
against the real broker, Spark and Delta. (The broker stopped under it and a stop and
restart: tests/integration/test_gameday.py, through game day's steps.)"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakehouse import PROJECT_ROOT
from lakehouse.core.settings import Settings
from lakehouse.ops.producer import produce
from tests.support import (
    lineage_events,
    overrides,
    settings_for,
    start_lakehouse,
)
from tests.support.silver import small_spec

pytestmark = pytest.mark.integration

FAULTS = {"gap": 1, "duplicate": 1, "reorder": 1, "malformed_json": 1}
FAST = {
    "bronze__trigger_interval": "1 second",
    "silver__trigger_interval": "1 second",
    "gold__every_seconds": "10",
}


class Console:
    """A running job's output, read as it comes (a pipe left unread would block it)."""

    def __init__(self, job: subprocess.Popen[str]) -> None:
        self.job, self.lines = job, list[str]()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.job.stdout is not None
        for line in self.job.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def stop(self, timeout_s: float = 180) -> int:
        """SIGTERM, then the exit code once the job ended."""
        self.job.send_signal(signal.SIGTERM)
        return self.wait(timeout_s)

    def wait(self, timeout_s: float = 180) -> int:
        try:
            code = self.job.wait(timeout_s)
        finally:
            self.job.kill()
        self._reader.join(10)
        return code


def wait_for(condition: Callable[[], object], timeout_s: float, what: str, job: Console) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert job.job.poll() is None, f"the job ended waiting for {what}:\n{job.text[-3000:]}"
        assert time.monotonic() < deadline, f"no {what} after {timeout_s}s:\n{job.text[-3000:]}"
        time.sleep(0.2)


def test_a_fail_expectation_stops_every_part_with_its_line(
    spark: SparkSession, kafka_bootstrap: str, tmp_path: Path
) -> None:
    root, prefix = tmp_path, "fail.sensors."
    suites = root / "expectations"
    shutil.copytree(PROJECT_ROOT / "expectations", suites, dirs_exist_ok=True)
    sessions = suites / "silver" / "sessions.json"
    suite = json.loads(sessions.read_text())
    suite["expectations"].append(
        {
            "name": "no_sensor_9",
            "severity": "fail",
            "type": "unexpected_rows_expectation",
            "kwargs": {
                "unexpected_rows_query": "SELECT * FROM {batch} WHERE sensor_id = 'sensor-009'"
            },
        }
    )
    sessions.write_text(json.dumps(suite))
    env = overrides(root, kafka_bootstrap, prefix, quality__suites=str(suites), **FAST)
    settings = settings_for(root, kafka_bootstrap, prefix)
    job = Console(start_lakehouse("run", "all", "--continuous", env=env))
    produce(small_spec(34, {}, sensors=1, first_sensor=9, topic_prefix=prefix), kafka_bootstrap)
    code = job.wait(300)

    assert code == 1, job.text[-3000:]
    last = job.text.strip().splitlines()[-1]
    assert last.startswith("lakehouse: error: silver failed: ") and "no_sensor_9 (fail)" in last
    assert last.endswith("every other part stopped after its running batch"), last
    progress = spark.read.format("delta").load(settings.storage.table_uri("ops.silver_progress"))
    (event,) = progress.where("status = 'error'").collect()
    assert event.batch_id is None and "no_sensor_9" in event.message
    # and OpenLineage heard it: silver's run FAILED with the expectation, bronze's completed
    ended = {
        e["job"]["name"]: e
        for e in lineage_events(settings.storage.local_state_dir)
        if e["eventType"] != "START" and e["job"]["name"] in ("bronze", "silver")
    }
    assert ended["bronze"]["eventType"] == "COMPLETE"
    assert ended["silver"]["eventType"] == "FAIL"
    assert "no_sensor_9" in ended["silver"]["run"]["facets"]["errorMessage"]["message"]


def test_parts_starting_side_by_side_on_new_lakes_never_race_on_the_catalog(
    spark: SparkSession, tmp_path: Path
) -> None:
    """What each part of `run all` does with the catalog as it starts (its progress and
    results tables named, the views over every writer's made again), from threads of one
    application, on new lakes in turn over a catalog that names the previous lake's
    tables: no part fails, and every name ends on the newest lake. Before the lock covered
    the catalog's reads, one start in four or so failed with TABLE_OR_VIEW_NOT_FOUND."""
    from lakehouse.observe import progress
    from lakehouse.storage import catalog

    writers = ("bronze", "silver", "gold")
    for lake in range(8):
        settings = settings_for(tmp_path / f"lake{lake}", "127.0.0.1:1", "unused.")
        failures: list[str] = []
        parts = [
            threading.Thread(target=start_part, args=(spark, settings, w, failures))
            for w in writers
        ]
        for part in parts:
            part.start()
        for part in parts:
            part.join()
        assert not failures, f"lake {lake}: {failures}"
        for writer in writers:
            name = progress.progress_table(writer).name
            assert catalog.names(spark, name, settings.storage.table_uri(name)), name


def start_part(spark: SparkSession, settings: Settings, writer: str, failures: list[str]) -> None:
    """A part's start, as far as the catalog goes, in a session of its own."""
    from lakehouse.observe import progress
    from lakehouse.quality import store

    session = spark.newSession()
    try:
        progress.create(session, settings.storage, writer)
        store.create_tables(session, settings.storage, writer, [writer])
    except Exception as error:  # the test's finding: any failure of a part
        failures.append(f"{writer}: {error}")


def test_a_name_another_application_makes_between_our_look_and_our_create_is_taken(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The jobs of a lake are applications of their own on one catalog, which the lock of
    one process does not cover: one may name a table just after another looked and found
    nothing (a run of the suite failed on it, `AlreadyExistsException`). The late one
    looks again and takes the name when it is the same table; a name on another table is
    still re-pointed."""
    from lakehouse.core.tables import TableSpec
    from lakehouse.storage import catalog, delta

    raced = TableSpec("ops.raced", "one row", "id BIGINT", "test")
    location = (tmp_path / "ops" / "raced").as_uri()
    delta.create(spark, raced, location)  # the other application
    looks, real_look = [None], catalog.location_of  # our first look came before its create
    monkeypatch.setattr(
        catalog, "location_of", lambda s, n: looks.pop() if looks else real_look(s, n)
    )
    catalog.register(spark, "ops.raced", location)
    assert catalog.names(spark, "ops.raced", location)

    elsewhere = (tmp_path / "elsewhere").as_uri()
    delta.create(spark, raced, elsewhere)
    assert catalog.names(spark, "ops.raced", elsewhere)
