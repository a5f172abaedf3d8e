"""gold.sensor_hourly: one row per sensor per hour of event time.

Sessions active, update records, distinct rows they changed, and min/mean/max of each
reading, from `silver.row_changes`. A late record changes an hour already aggregated:
that hour is recomputed whole, so the result does not depend on arrival order.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakehouse.graph.models import model
from silver import protocol, row_changes

NAME = "gold.sensor_hourly"
KEY = ("sensor_id", "hour")
METRICS = protocol.NUMBER_NAMES
UNITS = {f.name: f.meaning for f in protocol.VALUE_FIELDS}
"""The unit of each metric, as the protocol declares it, for the columns' comments."""


def metric_columns(period: str) -> str:
    """The min/mean/max/readings columns of every metric, described per `period`: a reading
    is a non-null value of a snapshot row or an upsert in `silver.row_changes`."""
    return ", ".join(
        f"{m}_min DOUBLE COMMENT 'lowest {m} reading in the {period}, in {UNITS[m]}; "
        "null if none', "
        f"{m}_mean DOUBLE COMMENT 'mean {m} reading in the {period}, in {UNITS[m]}; "
        "null if none', "
        f"{m}_max DOUBLE COMMENT 'highest {m} reading in the {period}, in {UNITS[m]}; "
        "null if none', "
        f"{m}_readings BIGINT NOT NULL COMMENT '{m} readings in the {period}: non-null values "
        "of snapshot rows and upserts, the count the mean is taken over'"
        for m in METRICS
    )


METRIC_COLUMNS = metric_columns("hour")
COLUMNS = (
    "sensor_id STRING NOT NULL COMMENT 'sensor of the readings: the one its Kafka topic names', "
    "hour TIMESTAMP NOT NULL COMMENT 'start of the event-time hour (UTC) the row changes fall in', "
    "sessions_active BIGINT NOT NULL "
    "COMMENT 'distinct sessions of the sensor with a row change in the hour', "
    f"{METRIC_COLUMNS}, "
    "updates BIGINT NOT NULL "
    "COMMENT 'row changes in the hour other than snapshot rows: inserts, updates and deletes', "
    "rows_changed BIGINT NOT NULL "
    "COMMENT 'distinct (session_id, row_id) changed in the hour other than by snapshot rows', "
    "session_ids ARRAY<STRING> NOT NULL "
    "COMMENT 'distinct session ids with a row change in the hour, sorted (days count from it)'"
)


def changed_hours(changes: DataFrame) -> DataFrame:
    """The (sensor, hour) of every changed row."""
    return changes.where(F.col("event_time").isNotNull()).select(
        "sensor_id", _hour(F.col("event_time")).alias("hour")
    )


def of_hours(hours: DataFrame, changes: DataFrame) -> tuple[DataFrame]:
    """`silver.row_changes` cut down to the given (sensor, hour) keys."""
    # The time range first: Delta skips every file whose event_time statistics lie
    # outside it, which a join alone would not.
    first, last = hours.agg(F.min("hour"), F.max("hour")).first() or (None, None)
    in_range = changes.where(
        (F.col("event_time") >= F.lit(first))
        & (F.col("event_time") < F.lit(last) + F.expr("INTERVAL 1 HOUR"))
    )
    keyed = in_range.withColumn("hour", _hour(F.col("event_time")))
    return (keyed.join(hours, list(KEY), "left_semi").select(*changes.columns),)


def _hour(event_time: Column) -> Column:
    return F.date_trunc("hour", event_time)


@model(
    reads=(row_changes.NAME,),
    key=KEY,
    columns=COLUMNS,
    changed_keys=changed_hours,
    narrow=of_hours,
)
def sensor_hourly(changes: DataFrame) -> DataFrame:
    """One row per sensor per hour of event time, from `silver.row_changes` rows.

    `updates` counts update records (one change each; snapshot rows are not updates),
    `rows_changed` the distinct (session, row) they changed, `<metric>_readings` the
    values a mean is taken over (snapshot rows included), so that coarser grains can
    weight it. `session_ids` lists the sessions, because distinct counts do not add up
    across hours.
    """
    update = F.col("op") != "snapshot"
    return (
        changes.where(F.col("sensor_id").isNotNull() & F.col("event_time").isNotNull())
        .groupBy("sensor_id", _hour(F.col("event_time")).alias("hour"))
        .agg(
            F.countDistinct("session_id").alias("sessions_active"),
            *[
                agg
                for m in METRICS
                for agg in (
                    F.min(m).alias(f"{m}_min"),
                    F.avg(m).alias(f"{m}_mean"),
                    F.max(m).alias(f"{m}_max"),
                    F.count(m).alias(f"{m}_readings"),
                )
            ],
            F.count(F.when(update, True)).alias("updates"),
            F.countDistinct(F.when(update, F.struct("session_id", "row_id"))).alias("rows_changed"),
            F.sort_array(F.collect_set("session_id")).alias("session_ids"),
        )
    )
