"""gold.sensor_daily's pure functions on a few inline rows."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.testing import assertDataFrameEqual

from gold.sensor_daily import changed_days, of_days, sensor_daily
from gold.sensor_hourly import COLUMNS as HOURLY_COLUMNS
from gold.sensor_hourly import METRICS

pytestmark = pytest.mark.integration


def hourly(spark: SparkSession, *rows: dict[str, Any]) -> DataFrame:
    """gold.sensor_hourly rows: every metric reads `mean` `readings` times unless given."""
    full = [
        {
            "sessions_active": len(r["session_ids"]),
            "updates": 1,
            "rows_changed": 1,
            **{f"{m}_{s}": r.get("mean") for m in METRICS for s in ("min", "mean", "max")},
            **{f"{m}_readings": r.get("readings", 1) for m in METRICS},
            **{k: v for k, v in r.items() if k not in ("mean", "readings")},
        }
        for r in rows
    ]
    return spark.createDataFrame(full, HOURLY_COLUMNS)


def test_a_days_mean_is_weighted_by_its_hours_readings(spark: SparkSession) -> None:
    hours = hourly(
        spark,
        {
            "sensor_id": "s1",
            "hour": datetime(2026, 1, 1, 0),
            "mean": 10.0,
            "readings": 1,
            "session_ids": ["a"],
        },
        {
            "sensor_id": "s1",
            "hour": datetime(2026, 1, 1, 1),
            "mean": 20.0,
            "readings": 3,
            "session_ids": ["a", "b"],
        },
    )

    (day,) = sensor_daily(hours).collect()

    assert day.temperature_mean == 17.5 and day.temperature_readings == 4
    assert (day.day, day.hours_active, day.sessions_active, day.updates) == (
        date(2026, 1, 1),
        2,
        2,
        2,
    )


def test_changed_hours_name_their_days(spark: SparkSession) -> None:
    changes = spark.createDataFrame(
        [("s1", datetime(2026, 1, 1, 23)), ("s1", datetime(2026, 1, 2, 0))],
        "sensor_id STRING, hour TIMESTAMP",
    )

    expected = spark.createDataFrame(
        [("s1", date(2026, 1, 1)), ("s1", date(2026, 1, 2))], "sensor_id STRING, day DATE"
    )
    assertDataFrameEqual(changed_days(changes), expected)


def test_narrowing_keeps_the_hours_of_the_given_days_only(spark: SparkSession) -> None:
    hours = hourly(
        spark,
        *(
            {"sensor_id": sensor, "hour": datetime(2026, 1, day, 5), "session_ids": ["a"]}
            for sensor in ("s1", "s2")
            for day in (1, 2)
        ),
    )
    days = spark.createDataFrame([("s1", date(2026, 1, 2))], "sensor_id STRING, day DATE")

    (narrowed,) = of_days(days, hours)

    assert [(r.sensor_id, r.hour) for r in narrowed.collect()] == [("s1", datetime(2026, 1, 2, 5))]
