"""gold.sensor_daily: one row per sensor per day, downsampled from `gold.sensor_hourly`."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from gold import sensor_hourly
from lakehouse.graph.models import model

NAME = "gold.sensor_daily"
KEY = ("sensor_id", "day")
METRICS = sensor_hourly.METRICS
COLUMNS = (
    "sensor_id STRING NOT NULL COMMENT 'sensor of the readings: the one its Kafka topic names', "
    "day DATE NOT NULL COMMENT 'event-time day (UTC) the row changes fall in', "
    "hours_active BIGINT NOT NULL "
    "COMMENT 'hours of the day with a row change (rows of gold.sensor_hourly), 1 to 24', "
    "sessions_active BIGINT NOT NULL "
    "COMMENT 'distinct sessions of the sensor with a row change in the day', "
    f"{sensor_hourly.metric_columns('day')}, "
    "updates BIGINT NOT NULL "
    "COMMENT 'row changes in the day other than snapshot rows: inserts, updates and deletes'"
)


def changed_days(hourly_changes: DataFrame) -> DataFrame:
    """The (sensor, day) of every changed hour."""
    return hourly_changes.select("sensor_id", F.to_date("hour").alias("day"))


def of_days(days: DataFrame, hourly: DataFrame) -> tuple[DataFrame]:
    """`gold.sensor_hourly` cut down to the given (sensor, day) keys."""
    by_day = hourly.withColumn("day", F.to_date("hour"))
    return (by_day.join(days, list(KEY), "left_semi").select(*hourly.columns),)


@model(
    reads=(sensor_hourly.NAME,),
    key=KEY,
    columns=COLUMNS,
    changed_keys=changed_days,
    narrow=of_days,
)
def sensor_daily(hourly: DataFrame) -> DataFrame:
    """One row per sensor per day, from `gold.sensor_hourly` rows.

    Means are weighted by the hours' readings; sessions are counted from the hours'
    session lists, since a session active in two hours is one session of the day.
    """
    return hourly.groupBy("sensor_id", F.to_date("hour").alias("day")).agg(
        F.count("*").alias("hours_active"),
        F.size(F.array_distinct(F.flatten(F.collect_list("session_ids"))))
        .cast("bigint")
        .alias("sessions_active"),
        *[
            agg
            for m in METRICS
            for agg in (
                F.min(f"{m}_min").alias(f"{m}_min"),
                (F.sum(F.col(f"{m}_mean") * F.col(f"{m}_readings")) / F.sum(f"{m}_readings")).alias(
                    f"{m}_mean"
                ),
                F.max(f"{m}_max").alias(f"{m}_max"),
                F.sum(f"{m}_readings").alias(f"{m}_readings"),
            )
        ],
        F.sum("updates").alias("updates"),
    )
