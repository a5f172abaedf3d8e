"""gold.sensor_hourly's pure functions on a few inline rows."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.testing import assertDataFrameEqual

from gold.sensor_hourly import changed_hours, of_hours, sensor_hourly
from silver import row_changes

pytestmark = pytest.mark.integration


def changes(spark: SparkSession, *rows: dict[str, Any]) -> DataFrame:
    """silver.row_changes rows, with whatever a row leaves out empty or zero."""
    defaults = {
        "sensor_id": "s1",
        "session_id": "a",
        "row_id": "r1",
        "op": "update",
        "seq": 1,
        "ordinal": 0,
        "batch_id": 0,
        "topic": "sensors.s1",
        "partition": 0,
        "offset": 0,
    }
    return spark.createDataFrame([{**defaults, **row} for row in rows], row_changes.TABLE.columns)


def test_an_hour_counts_updates_and_the_rows_they_changed_but_not_snapshot_rows(
    spark: SparkSession,
) -> None:
    at = datetime(2026, 1, 1, 7, 15)
    rows = changes(
        spark,
        {"op": "snapshot", "row_id": "r1", "temperature": 10.0, "event_time": at},
        {"op": "update", "row_id": "r1", "temperature": 20.0, "event_time": at},
        {"op": "update", "row_id": "r1", "temperature": 30.0, "event_time": at, "seq": 2},
        {"op": "insert", "row_id": "r2", "session_id": "b", "event_time": at, "seq": 3},
    )

    (hour,) = sensor_hourly(rows).collect()

    assert (hour.hour, hour.updates, hour.rows_changed, hour.sessions_active) == (
        datetime(2026, 1, 1, 7),
        3,
        2,
        2,
    )
    assert (hour.temperature_min, hour.temperature_mean, hour.temperature_max) == (10, 20, 30)
    assert hour.temperature_readings == 3 and hour.session_ids == ["a", "b"]


def test_changed_hours_truncate_event_times_and_skip_rows_without_one(
    spark: SparkSession,
) -> None:
    rows = changes(
        spark,
        {"event_time": datetime(2026, 1, 1, 7, 59, 59)},
        {"event_time": None},
    )

    expected = spark.createDataFrame(
        [("s1", datetime(2026, 1, 1, 7))], "sensor_id STRING, hour TIMESTAMP"
    )
    assertDataFrameEqual(changed_hours(rows), expected)


def test_narrowing_keeps_the_changes_of_the_given_hours_only(spark: SparkSession) -> None:
    rows = changes(
        spark,
        {"event_time": datetime(2026, 1, 1, 7, 30), "offset": 1},
        {"event_time": datetime(2026, 1, 1, 8, 30), "offset": 2},
        {"event_time": datetime(2026, 1, 1, 7, 30), "offset": 3, "sensor_id": "s2"},
    )
    hours = spark.createDataFrame(
        [("s1", datetime(2026, 1, 1, 7))], "sensor_id STRING, hour TIMESTAMP"
    )

    (narrowed,) = of_hours(hours, rows)

    assert [r.offset for r in narrowed.collect()] == [1]
    assert narrowed.columns == rows.columns
