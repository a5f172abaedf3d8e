"""Gold checked like silver, on real Spark, Delta and Great Expectations: each model's rows
are judged before they are written (fail / quarantine), and the whole tables reconcile
with the silver versions they were built from."""

from __future__ import annotations

import json
import random
import shutil

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from gold import sensor_hourly, session_summary
from lakehouse import PROJECT_ROOT
from lakehouse.core.settings import Settings
from lakehouse.definitions import MODELS
from lakehouse.ops.producer import TrafficSpec
from lakehouse.quality.checks import Checker
from lakehouse.quality.gates import QualityError, write_gate
from lakehouse.quality.suites import load_suites
from lakehouse.runtime.incremental import run_models
from lakehouse.storage.model_runs import RUNS
from silver import reconstruct, row_changes, sessions
from tests.support import settings_for
from tests.support.bronze_tables import kafka_records, sent_at_event_time, write_bronze

pytestmark = pytest.mark.integration

SPEC = TrafficSpec(
    seed=41, sensors=2, sessions_per_sensor=3, rows_per_snapshot=5, updates_per_session=20
)


ROW_LEVEL = ("counts_consistent", "hour_unique", "hour_truncated", "means_within_range")


def table(spark: SparkSession, s: Settings, name: str) -> DataFrame:
    return spark.read.format("delta").load(s.storage.table_uri(name))


def gated_run(spark: SparkSession, s: Settings) -> None:
    run_models(spark, s.storage, MODELS, gate=write_gate(s.quality, s.storage, "gold"))


def check(spark: SparkSession, s: Settings, name: str) -> dict[str, tuple[bool, int | None]]:
    """`lakehouse check` of one gold table, its inputs read as the last run read them:
    expectation -> (held, unexpected rows)."""
    found = Checker(spark, s, load_suites(s.quality.suites_dir, name)).check(name)
    assert found is not None
    return {o.check.name: (o.success, o.unexpected_count) for o in found.outcomes}


@pytest.fixture(scope="module")
def lake(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Bronze, silver and a gated gold run over clean traffic; suites copied, to edit.
    The tests below damage it in turn, each a different table, in this order."""
    tmp_path = tmp_path_factory.mktemp("gold-quality")
    shutil.copytree(PROJECT_ROOT / "expectations", tmp_path / "expectations")
    s = settings_for(
        tmp_path,
        "127.0.0.1:9",
        "sensors.",
        quality__validate_streams="false",
        quality__suites=str(tmp_path / "expectations"),
    )
    bronze = s.storage.table_uri("bronze.sensor_records")
    write_bronze(spark, bronze, kafka_records(SPEC), 1, random.Random(1), sent_at_event_time)
    reconstruct.run(spark, s)
    gated_run(spark, s)
    return s


def test_clean_gold_passes_its_suites_in_the_run_and_over_the_whole_tables(
    spark: SparkSession, lake: Settings
) -> None:
    results = table(spark, lake, "quality.gold_expectation_results")
    assert results.count() > 0 and results.where("NOT success").count() == 0
    checker = Checker(spark, lake, load_suites(lake.quality.suites_dir))
    for model in MODELS:
        found, again = checker.check(model.name), checker.check(model.name)
        assert found is not None and all(o.success for o in found.outcomes), model.name
        # The same versions, the same suite: the outcome again, without validating anew.
        assert again is not None and again.reused and not found.reused
        assert again.outcomes == found.outcomes
    recorded = table(spark, lake, "quality.check_expectation_results").groupBy("table_name")
    assert {r.table_name: r["count"] for r in recorded.count().collect()} == {
        m.name: len(load_suites(lake.quality.suites_dir, m.name)[0].checks) for m in MODELS
    }


def test_a_failing_fail_expectation_leaves_the_model_table_as_it_was(
    spark: SparkSession, lake: Settings
) -> None:
    path = lake.quality.suites_dir / "gold" / "sensor_hourly.json"
    shipped = path.read_text()
    suite = json.loads(shipped)
    suite["expectations"].append(
        {
            "name": "at_most_two_updates_an_hour",
            "severity": "fail",
            "type": "expect_column_values_to_be_between",
            "kwargs": {"column": "updates", "max_value": 2},
        }
    )
    path.write_text(json.dumps(suite))
    before = table(spark, lake, sensor_hourly.NAME).collect()
    version = _version(spark, lake, sensor_hourly.NAME)

    line = r"gold.sensor_hourly run: expectation at_most_two_updates_an_hour \(fail\) failed"
    try:
        with pytest.raises(QualityError, match=line + r": unexpected \d+"):
            run_models(
                spark,
                lake.storage,
                MODELS,
                full_refresh=True,
                gate=write_gate(lake.quality, lake.storage, "gold"),
            )
    finally:
        path.write_text(shipped)

    assert _version(spark, lake, sensor_hourly.NAME) == version
    assert sorted(table(spark, lake, sensor_hourly.NAME).collect()) == sorted(before)
    failed = table(spark, lake, "quality.gold_expectation_results").where("NOT success")
    assert [(r.table_name, r.expectation, r.mode) for r in failed.collect()] == [
        ("gold.sensor_hourly", "at_most_two_updates_an_hour", "run")
    ]


def test_a_quarantined_gold_row_is_diverted_and_its_stale_row_removed(
    spark: SparkSession, lake: Settings
) -> None:
    # A sensor clock that ran backwards: the session's first event after its last.
    victim = table(spark, lake, sessions.NAME).orderBy("sensor_id", "session_id").first()
    assert victim is not None
    spark.sql(
        f"UPDATE delta.`{lake.storage.table_uri(sessions.NAME)}` "
        "SET first_event_time = last_event_time + INTERVAL 1 HOUR "
        f"WHERE sensor_id = '{victim.sensor_id}' AND session_id = '{victim.session_id}'"
    )

    gated_run(spark, lake)

    summary = table(spark, lake, session_summary.NAME)
    kept_out = (F.col("sensor_id") == victim.sensor_id) & (F.col("session_id") == victim.session_id)
    assert summary.where(kept_out).count() == 0
    assert summary.count() == table(spark, lake, sessions.NAME).count() - 1
    (diverted,) = table(spark, lake, "gold.quarantine").collect()
    assert (diverted.table_name, diverted.expectation) == (session_summary.NAME, "times_ordered")
    assert json.loads(diverted.row_json)["session_id"] == victim.session_id
    (result,) = (
        table(spark, lake, "quality.gold_expectation_results")
        .where("expectation = 'times_ordered' AND NOT success")
        .collect()
    )
    assert (result.quarantined, result.unexpected_count) == (1, 1)
    # over the whole table, a quarantined session is accounted for, not missing
    assert all(held for held, _ in check(spark, lake, session_summary.NAME).values())

    # The clock repaired: the session's summary is written again, and its quarantined row
    # goes (it would excuse the session in the reconciliation for good).
    spark.sql(
        f"UPDATE delta.`{lake.storage.table_uri(sessions.NAME)}` "
        f"SET first_event_time = TIMESTAMP '{victim.first_event_time:%Y-%m-%d %H:%M:%S.%f}' "
        f"WHERE sensor_id = '{victim.sensor_id}' AND session_id = '{victim.session_id}'"
    )
    gated_run(spark, lake)

    assert table(spark, lake, session_summary.NAME).where(kept_out).count() == 1
    assert table(spark, lake, "gold.quarantine").count() == 0
    assert all(held for held, _ in check(spark, lake, session_summary.NAME).values())


def test_a_silver_row_changed_behind_golds_back_fails_the_reconciliation(
    spark: SparkSession, lake: Settings
) -> None:
    # A commit that claims to change no data (as compaction's do) yet adds an update:
    # no change feed or stream shows it, so gold's incremental run cannot see it.
    path = lake.storage.table_uri(row_changes.NAME)
    victim = (
        spark.read.format("delta").load(path)
        .where("op = 'update' AND event_time IS NOT NULL").orderBy("seq").limit(1)
    )  # fmt: skip
    forged = victim.withColumn("seq", F.col("seq") + 1_000_000)
    forged.write.format("delta").mode("append").option("dataChange", "false").save(path)

    gated_run(spark, lake)  # sees a new silver version with no changes in it
    hourly_run = (
        table(spark, lake, RUNS.name)
        .where(f"model = '{sensor_hourly.NAME}'")
        .orderBy(F.desc("started_at"))
        .first()
    )
    assert hourly_run is not None and hourly_run.changed_keys == 0

    outcomes = check(spark, lake, sensor_hourly.NAME)
    assert outcomes["updates_reconcile_with_silver"] == (False, 1)
    assert all(held for name, (held, _) in outcomes.items() if "reconcile" not in name)


def test_a_corrupted_gold_row_fails_its_row_level_expectation(
    spark: SparkSession, lake: Settings
) -> None:
    path = lake.storage.table_uri(sensor_hourly.NAME)
    row = table(spark, lake, sensor_hourly.NAME).orderBy("sensor_id", "hour").first()
    assert row is not None
    spark.sql(
        f"UPDATE delta.`{path}` SET sessions_active = 0 "
        f"WHERE sensor_id = '{row.sensor_id}' AND hour = '{row.hour.isoformat()}'"
    )

    outcomes = check(spark, lake, sensor_hourly.NAME)

    assert outcomes["counts_consistent"] == (False, 1)
    # (the forged silver row of the test before still fails the reconciliation)
    assert all(held for name, (held, _) in outcomes.items() if name in ROW_LEVEL[1:])


def _version(spark: SparkSession, s: Settings, name: str) -> int:
    history = spark.sql(f"DESCRIBE HISTORY delta.`{s.storage.table_uri(name)}` LIMIT 1").first()
    assert history is not None
    return int(history.version)
