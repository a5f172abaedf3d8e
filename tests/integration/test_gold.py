"""Gold against real Spark and Delta: an independent pandas computation from silver, and
incremental runs that equal a full refresh, late records included."""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.testing import assertDataFrameEqual

from bronze import sensor_records
from gold import sensor_daily, sensor_hourly, session_summary
from lakehouse import delta
from lakehouse.incremental import run_models
from lakehouse.pipeline import MODELS
from lakehouse.producer import TrafficSpec, generate_traffic
from lakehouse.settings import Settings
from silver import reconstruct, row_changes, sessions, violations
from tests.support import overrides, run_lakehouse, settings_for

pytestmark = pytest.mark.integration

METRICS = ("temperature", "humidity", "pressure")
BASE = TrafficSpec(
    sensors=2,
    sessions_per_sensor=3,
    rows_per_snapshot=5,
    updates_per_session=12,
    resync_every=5,
    session_stagger_seconds=1500,
    partitions=2,
)
INCREMENTS = (
    replace(BASE, seed=1, start_time=datetime(2026, 1, 1, 0, 0, tzinfo=UTC),
            faults={"gap": 1, "duplicate": 1, "malformed_json": 1}),
    replace(BASE, seed=2, start_time=datetime(2026, 1, 2, 22, 30, tzinfo=UTC)),
    # Late: sessions whose events fall into hours and a day already aggregated.
    replace(BASE, seed=3, start_time=datetime(2026, 1, 1, 0, 10, tzinfo=UTC),
            sessions_per_sensor=2),
)  # fmt: skip


class Bronze:
    """A bronze table filled increment by increment, offsets running on per partition as a
    broker's would."""

    def __init__(self, spark: SparkSession, path: str) -> None:
        self.spark, self.path = spark, path
        self.next_offset: dict[tuple[str, int], int] = defaultdict(int)
        delta.create(spark, sensor_records.TABLE, path)

    def append(self, spec: TrafficSpec) -> None:
        now = datetime.now(UTC)
        rows = []
        for r in generate_traffic(spec):
            offset = self.next_offset[(r.topic, r.partition)]
            self.next_offset[(r.topic, r.partition)] += 1
            rows.append((r.topic, r.partition, offset, r.key, r.value, now, 0, [], now, 0))
        random.Random(spec.seed).shuffle(rows)
        schema = self.spark.read.format("delta").load(self.path).schema
        self.spark.createDataFrame(rows, schema).write.format("delta").mode("append").save(
            self.path
        )


def lake_settings(root: Path) -> Settings:
    return settings_for(root, "127.0.0.1:9", "sensors.", quality__validate_streams="false")


def table(spark: SparkSession, s: Settings, name: str) -> DataFrame:
    return spark.read.format("delta").load(s.storage.table_uri(name))


@pytest.fixture(scope="module")
def incremental_lake(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Settings, list[dict[str, Any]]]:
    """Three increments through bronze, silver and gold, gold incremental after the first."""
    s = lake_settings(tmp_path_factory.mktemp("gold"))
    bronze = Bronze(spark, s.storage.table_uri("bronze.sensor_records"))
    hours_seen = []
    for spec in INCREMENTS:
        bronze.append(spec)
        reconstruct.run(spark, s)
        run_models(spark, s.storage, MODELS)
        hours_seen.append(
            {
                (r.sensor_id, r.hour): r.sessions_active
                for r in table(spark, s, sensor_hourly.NAME).collect()
            }
        )
    return s, hours_seen


def hourly_reference(changes: pd.DataFrame) -> dict[tuple[Any, ...], dict[str, Any]]:
    """gold.sensor_hourly computed with pandas, the plain way."""
    changes = changes[changes.sensor_id.notna() & changes.event_time.notna()].assign(
        hour=lambda c: c.event_time.dt.floor("h")
    )
    out = {}
    for (sensor, hour), group in changes.groupby(["sensor_id", "hour"]):
        updates = group[group.op != "snapshot"]
        out[(sensor, hour)] = {
            "sessions_active": group.session_id.nunique(),
            "updates": len(updates),
            "rows_changed": len(set(zip(updates.session_id, updates.row_id, strict=True))),
            "session_ids": sorted(set(group.session_id)),
            **_metrics(group),
        }
    return out


def daily_reference(changes: pd.DataFrame) -> dict[tuple[Any, ...], dict[str, Any]]:
    """gold.sensor_daily straight from the row changes (not from hourly) with pandas."""
    changes = changes[changes.sensor_id.notna() & changes.event_time.notna()].assign(
        day=lambda c: c.event_time.dt.date, hour=lambda c: c.event_time.dt.floor("h")
    )
    return {
        (sensor, day): {
            "hours_active": group.hour.nunique(),
            "sessions_active": group.session_id.nunique(),
            "updates": int((group.op != "snapshot").sum()),
            **_metrics(group),
        }
        for (sensor, day), group in changes.groupby(["sensor_id", "day"])
    }


def summary_reference(
    silver_sessions: pd.DataFrame, silver_violations: pd.DataFrame
) -> dict[tuple[Any, ...], dict[str, Any]]:
    named = silver_violations.dropna(subset=["session_id"])
    rejected = named.groupby(["sensor_id", "session_id"]).size()
    return {
        (r.sensor_id, r.session_id): {
            "status": r.status,
            "records": r.records,
            "updates": r.updates,
            "final_rows": r.table_rows,
            "violations": rejected.get((r.sensor_id, r.session_id), 0),
            "duration_seconds": (r.last_event_time - r.first_event_time).total_seconds(),
            "first_offset": r.first_offset,
            "last_offset": r.offset,
            "last_partition": r.partition,
        }
        for r in silver_sessions.itertuples()
    }


def _metrics(group: pd.DataFrame) -> dict[str, Any]:
    return {
        f"{m}_{stat}": getattr(group[m], fn)()
        for m in METRICS
        for stat, fn in (("min", "min"), ("mean", "mean"), ("max", "max"), ("readings", "count"))
    }


def assert_rows(
    found: DataFrame, key: tuple[str, ...], expected: dict[tuple[Any, ...], dict[str, Any]]
) -> None:
    rows = {tuple(_cell(r[k]) for k in key): r.asDict() for r in found.collect()}
    assert set(rows) == {tuple(_cell(k) for k in keys) for keys in expected}
    for keys, values in expected.items():
        row = rows[tuple(_cell(k) for k in keys)]
        for column, value in values.items():
            assert _same(row[column], value), (keys, column, row[column], value)


def _cell(value: Any) -> Any:
    return value.to_pydatetime() if isinstance(value, pd.Timestamp) else value


def _same(found: Any, expected: Any) -> bool:
    if isinstance(expected, float) and not isinstance(found, str):
        if math.isnan(expected):
            return found is None
        return math.isclose(found, expected, rel_tol=1e-9)
    return bool(found == expected)


def test_gold_equals_an_independent_pandas_computation_from_silver(
    spark: SparkSession, incremental_lake: tuple[Settings, list[dict[str, Any]]]
) -> None:
    s, _ = incremental_lake
    assert_gold_equals_pandas_from_silver(spark, s)


def assert_gold_equals_pandas_from_silver(spark: SparkSession, s: Settings) -> None:
    changes = table(spark, s, row_changes.NAME).toPandas()
    assert_rows(table(spark, s, sensor_hourly.NAME), sensor_hourly.KEY, hourly_reference(changes))
    assert_rows(table(spark, s, sensor_daily.NAME), sensor_daily.KEY, daily_reference(changes))
    assert_rows(
        table(spark, s, session_summary.NAME),
        session_summary.KEY,
        summary_reference(
            table(spark, s, sessions.NAME).toPandas(), table(spark, s, violations.NAME).toPandas()
        ),
    )


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
