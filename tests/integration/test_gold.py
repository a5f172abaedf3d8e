"""Gold against real Spark and Delta: an independent pandas computation from silver, and
incremental runs that equal a full refresh, late records included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from gold import sensor_daily, sensor_hourly, session_summary
from lakehouse.core.settings import Settings
from lakehouse.definitions import MODELS
from lakehouse.ops.producer import TrafficSpec
from lakehouse.runtime.incremental import run_models
from silver import reconstruct, row_changes, sessions, violations
from tests.support import compiled_plans, overrides, run_lakehouse, settings_for
from tests.support.gold import INCREMENTS, Bronze, assert_gold_equals_pandas_from_silver, table

pytestmark = pytest.mark.integration


def lake_settings(root: Path) -> Settings:
    return settings_for(root, "127.0.0.1:9", "sensors.", quality__validate_streams="false")


@pytest.fixture(scope="module")
def incremental_lake(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Settings, list[dict[str, Any]]]:
    """Three increments through bronze, silver and gold, gold incremental after the first,
    on the plans as deployed: the module's claims are that gold equals independent
    computations."""
    s = lake_settings(tmp_path_factory.mktemp("gold"))
    bronze = Bronze(spark, s.storage.table_uri("bronze.sensor_records"))
    hours_seen = []
    for spec in INCREMENTS:
        bronze.append(spec)
        with compiled_plans(spark):
            reconstruct.run(spark, s)
            run_models(spark, s.storage, MODELS)
        hours_seen.append(
            {
                (r.sensor_id, r.hour): r.sessions_active
                for r in table(spark, s, sensor_hourly.NAME).collect()
            }
        )
    return s, hours_seen


def test_gold_equals_an_independent_pandas_computation_from_silver(
    spark: SparkSession, incremental_lake: tuple[Settings, list[dict[str, Any]]]
) -> None:
    s, _ = incremental_lake
    assert_gold_equals_pandas_from_silver(spark, s)


def test_incremental_runs_equal_a_full_refresh_even_after_late_records(
    spark: SparkSession, incremental_lake: tuple[Settings, list[dict[str, Any]]]
) -> None:
    s, hours_seen = incremental_lake
    runs = spark.read.format("delta").load(s.storage.table_uri("gold.model_runs"))
    modes = [(r.model, r.mode) for r in runs.orderBy("started_at").collect()]
    assert modes.count(("gold.sensor_hourly", "incremental")) == len(INCREMENTS) - 1
    # The late increment changed hours the first run had aggregated.
    first, last = hours_seen[0], hours_seen[-1]
    assert any(last[key] > sessions for key, sessions in first.items())

    hourly = sensor_hourly.sensor_hourly(table(spark, s, row_changes.NAME))
    full = {
        sensor_hourly.NAME: hourly,
        sensor_daily.NAME: sensor_daily.sensor_daily(hourly),
        session_summary.NAME: session_summary.session_summary(
            table(spark, s, sessions.NAME), table(spark, s, violations.NAME)
        ),
    }
    for name, expected in full.items():
        found = table(spark, s, name)
        assertDataFrameEqual(
            found,
            expected.select(*found.columns),
            checkRowOrder=False,
            rtol=1e-9,
            ignoreNullable=True,
        )


def test_run_gold_selects_downstream_models_and_rebuilds_on_request(
    incremental_lake: tuple[Settings, list[dict[str, Any]]], tmp_path: Path
) -> None:
    s, _ = incremental_lake
    env = overrides(tmp_path, "127.0.0.1:9", "sensors.")
    env["LAKEHOUSE__STORAGE__ROOT"] = s.storage.root

    result = run_lakehouse("run", "gold", "--select", "sensor_hourly+", "--full-refresh", env=env)

    assert result.returncode == 0, result.stderr
    assert "gold.sensor_hourly: full (--full-refresh)" in result.stdout
    assert "gold.sensor_daily: full (--full-refresh)" in result.stdout
    assert "gold.session_summary" not in result.stdout
    assert "gold: 2 models (full=2)" in result.stdout


def test_a_model_on_inputs_under_the_crossover_size_is_rebuilt_in_full_by_itself(
    spark: SparkSession, tmp_path: Path
) -> None:
    s = lake_settings(tmp_path)
    bronze = Bronze(spark, s.storage.table_uri("bronze.sensor_records"))
    summary = session_summary.NAME

    def run_after(increment: TrafficSpec, slack: int) -> tuple[str, str]:
        """Mode and reason of the summary's run after `increment`, with the crossover
        `slack` bytes above the size of its inputs."""
        bronze.append(increment)
        reconstruct.run(spark, s)
        inputs = sum(
            spark.sql(f"DESCRIBE DETAIL delta.`{s.storage.table_uri(n)}`").first()["sizeInBytes"]
            for n in (sessions.NAME, violations.NAME)
        )
        runs = run_models(spark, s.storage, MODELS, full_below_bytes=inputs + slack)
        (run,) = [r for r in runs if r.model == summary]
        return run.mode, run.reason

    run_after(INCREMENTS[0], 0)

    mode, reason = run_after(INCREMENTS[2], 1)
    assert mode == "full"
    assert reason.endswith("under gold.full_refresh_below_mb: a full refresh is cheaper")
    assert run_after(INCREMENTS[1], 0) == ("incremental", "")


def test_the_run_log_as_remembered_is_the_run_log_as_read_whatever_else_wrote_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    from datetime import UTC, datetime

    from lakehouse.storage import delta, model_runs

    s = lake_settings(tmp_path)
    uri = s.storage.table_uri(model_runs.RUNS.name)
    delta.create(spark, model_runs.RUNS, uri)

    def append(model: str, version: int) -> dict[str, dict[str, tuple[int, str]]]:
        row = ("r", model, "incremental", {"silver.x": version}, {"silver.x": "id"}, 1, 1,
               datetime.now(UTC), 0.1)  # fmt: skip
        delta.append(spark.createDataFrame([row], model_runs.RUNS.columns), uri)
        return {model: {"silver.x": (version, "id")}}

    def read_afresh() -> dict[str, dict[str, tuple[int, str]]]:
        model_runs._READ.clear()
        return model_runs.last_versions(spark, s.storage)

    append("gold.a", 1)
    assert model_runs.last_versions(spark, s.storage) == {"gold.a": {"silver.x": (1, "id")}}
    append("gold.a", 5)  # another writer, between this process's read and its append
    model_runs.appended(spark, s.storage, append("gold.b", 3))
    expected = {"gold.a": {"silver.x": (5, "id")}, "gold.b": {"silver.x": (3, "id")}}
    assert model_runs.last_versions(spark, s.storage) == expected
    # This process's append right after its read: known without reading, and the same.
    model_runs.appended(spark, s.storage, append("gold.a", 7))
    remembered = model_runs.last_versions(spark, s.storage)
    assert remembered == {**expected, "gold.a": {"silver.x": (7, "id")}} == read_afresh()
