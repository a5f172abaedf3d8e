"""Changing the code of a running pipeline (`lakehouse shadow`), with a real broker, Spark,
Delta and the metastore: a live `run all --continuous` under traffic; silver and gold built
again beside it with another session timeout; the compare naming exactly the sessions
that timeout changes; the swap while traffic flows; and back."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakehouse import PROJECT_ROOT
from lakehouse.core.settings import Settings
from lakehouse.definitions import TABLES, at_tags, at_versions
from lakehouse.gameday import reconcile, reference
from lakehouse.ops import shadow
from lakehouse.ops.producer import TrafficSpec, generate_traffic, produce
from lakehouse.ops.shadow_compare import Comparison, compare
from lakehouse.storage import catalog, delta
from tests.support import (
    foreign_lines,
    lakehouse_command,
    overrides,
    run_lakehouse,
    settings_for,
)
from tests.support.gold import assert_gold_equals_pandas_from_silver
from tests.support.kafka import as_tuples, consume_all, quarantined_rows
from tests.support.silver import assert_matches, silver_tables

pytestmark = pytest.mark.integration

PREFIX = "shadow.sensors."
TIMEOUT_S = 5
"""The shadow's session timeout; the live one keeps conf's 30 minutes."""
TRAFFIC = TrafficSpec(
    sensors=2, sessions_per_sensor=2, rows_per_snapshot=4, updates_per_session=8,
    topic_prefix=PREFIX, partitions=2,
)  # fmt: skip


def test_a_shadow_with_another_timeout_is_compared_swapped_in_under_traffic_and_back(
    spark: SparkSession, kafka_bootstrap: str, tmp_path: Path
) -> None:
    env = overrides(tmp_path, kafka_bootstrap, PREFIX, **KEYS)
    settings = settings_for(tmp_path, kafka_bootstrap, PREFIX, **KEYS)
    opened, sent = send_sessions_left_open_then_others(kafka_bootstrap)
    live = started_into(tmp_path / "live.out", env, "run", "all", "--continuous")
    started = run_lakehouse("shadow", "start", "silver", env=env)
    assert started.returncode == 0 and "shadow v2: silver and gold" in started.stdout, started
    timeout = {"LAKEHOUSE__SILVER__SESSION_TIMEOUT_SECONDS": str(TIMEOUT_S)}
    built = started_into(
        tmp_path / "shadow.out", {**env, **timeout}, "shadow", "run", "--continuous"
    )
    try:
        # Two new applications and this one on two cores, beside another module's test:
        # on the clone run of 40f35ff they took four minutes to their first batch.
        found = compare(spark, settings, wait_s=480)
        assert_only_the_sessions_left_open_differ(found, opened)

        more = replace(TRAFFIC, seed=3, first_sensor=5)
        flowing = threading.Thread(target=produce, args=(more, kafka_bootstrap, None, 4.0))
        flowing.start()
        shadow.swap(spark, settings, back=False, wait_s=240)  # while traffic flows
        old = at_tags(settings, {"silver": "v1", "gold": "v1"})
        retired = {name: latest(spark, old, name) for name in RETIRED}
        assert expired_by_name(spark) == len(opened)  # SQL by name: the new version
        flowing.join()
        sent += sum(1 for _ in generate_traffic(more))
        wait_caught_up(spark, at_versions(settings), sent)
    finally:
        for job in (live, built):
            job.send_signal(signal.SIGTERM)
        for job in (live, built):
            job.wait(180)
        outputs = [(tmp_path / f"{name}.out").read_text() for name in ("live", "shadow")]
        print("\n".join(o[-3000:] for o in outputs))  # shown by pytest if the test failed
    assert [job.returncode for job in (live, built)] == [0, 0], [o[-3000:] for o in outputs]
    assert not foreign_lines(outputs[0] + outputs[1])
    assert "silver: version v1 retired (v2 is live): stopping after its batch" in outputs[0]
    assert shadow.names_against(spark, settings) == []  # v1's late turns took no name back
    late = TABLES["gold.session_summary"]  # ... nor does one more, of v1's gold
    delta.create(spark, late, old.storage.table_uri(late.name))
    assert catalog.names(spark, late.name, at_versions(settings).storage.table_uri(late.name))

    assert_once_as_the_shadows_timeout_says(spark, settings, kafka_bootstrap, sent, opened)
    assert {name: latest(spark, old, name) for name in retired} == retired  # left as it was

    shadow.swap(spark, settings, back=True, wait_s=60)
    assert expired_by_name(spark) == 0
    assert at_versions(settings).storage.table_uri("silver.sessions").endswith("/silver/sessions")
    shadow.drop(spark, settings)  # v2, a shadow again
    assert not catalog.is_delta(spark, old.storage.table_uri("silver.sessions") + "__v2")


def send_sessions_left_open_then_others(bootstrap: str) -> tuple[set[tuple[str, str]], int]:
    """Sessions left open, then silent for longer than the shadow's timeout while others
    move Kafka's clock on: the shadow expires them, the live version keeps them open."""
    opening = replace(TRAFFIC, seed=1, first_sensor=3, end_sessions=False)
    traffic = generate_traffic(opening)
    opened = {(r.topic.removeprefix(PREFIX), r.key.decode()) for r in traffic if r.key}
    sent = produce(opening, bootstrap).records
    time.sleep(TIMEOUT_S + 4)
    return opened, sent + produce(replace(TRAFFIC, seed=2), bootstrap).records


def assert_only_the_sessions_left_open_differ(
    found: Comparison, opened: set[tuple[str, str]]
) -> None:
    changed = {t.table: t for t in found.tables if not t.equal}
    assert set(changed) == {"silver.sessions", "gold.session_summary"}, found.as_json()
    for diff in changed.values():
        assert diff.counts == {"only_live": 0, "only_shadow": 0, "changed": len(opened)}
        assert diff.columns_changed == {"status": len(opened)}
        samples = diff.samples["changed"]
        assert {(r["key"]["sensor_id"], r["key"]["session_id"]) for r in samples} == opened
        assert {tuple(r["columns"]["status"]) for r in samples} == {("open", "expired")}


def assert_once_as_the_shadows_timeout_says(
    spark: SparkSession, settings: Settings, bootstrap: str, sent: int, opened: set[tuple[str, str]]
) -> None:
    """Every Kafka record once in bronze, and in the live silver and gold as the reference
    says with the sessions left open expired."""
    records = consume_all(bootstrap, PREFIX)
    assert len(records) == sent
    bronze = spark.read.format("delta").load(settings.storage.table_uri("bronze.sensor_records"))
    rows = as_tuples(bronze.collect()) + as_tuples(quarantined_rows(spark, settings.storage))
    assert reconcile.kafka_vs_bronze(records, rows).ok
    kept = sorted(r for r in records if reference.reaches_silver(r[3], r[4]))
    expected = reference.reconstruct([(t, p, o, v) for t, p, o, _, v, _ in kept], PREFIX)
    expected.sessions = [
        (key, s._replace(status="expired") if (s.sensor_id, key[1]) in opened else s)
        for key, s in expected.sessions
    ]
    live = at_versions(settings)
    assert_matches(silver_tables(spark, live), expected)
    assert_gold_equals_pandas_from_silver(spark, live)


def started_into(output: Path, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    """The CLI left running, its output to a file: a pipe read only at its end would fill
    and stop it (a continuous run prints every batch and gold's every turn)."""
    with output.open("wb") as out:
        return subprocess.Popen(lakehouse_command(*args), env={**os.environ, **env},
                                cwd=PROJECT_ROOT, stdout=out, stderr=subprocess.STDOUT)  # fmt: skip


RETIRED = ("silver.sessions", "gold.session_summary")
KEYS = {
    "silver__allowed_lateness_seconds": "2",
    "gold__every_seconds": "5",
    "bronze__trigger_interval": "1 second",
    "silver__trigger_interval": "1 second",
}


def latest(spark: SparkSession, settings: Settings, name: str) -> int:
    return delta.latest(spark, settings.storage.table_uri(name)).version


def expired_by_name(spark: SparkSession) -> int:
    spark.catalog.refreshTable("gold.session_summary")
    return spark.sql("SELECT * FROM gold.session_summary WHERE status = 'expired'").count()


def wait_caught_up(
    spark: SparkSession, settings: Settings, sent: int, limit_s: float = 300
) -> None:
    """Until bronze holds every record sent, the live silver read all of it and its gold
    all of silver."""
    bronze = settings.storage.table_uri("bronze.sensor_records")
    deadline = time.monotonic() + limit_s
    while True:
        where = shadow.where(spark, settings)
        held = spark.read.format("delta").load(bronze).count()
        done = where.live.silver_read == where.bronze_version + 1 and not where.live.silver_busy
        if held == sent and done and not any(where.live.gold_behind.values()):
            return
        assert time.monotonic() < deadline, (held, sent, where.as_json())
        time.sleep(3)
