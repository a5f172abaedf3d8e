"""Kafka records as the broker holds them and as bronze keeps them, and the faults to send."""

from __future__ import annotations

from pyspark.sql import Row, SparkSession

from bronze import sensor_records
from lakehouse.core.settings import StorageSettings
from lakehouse.gameday import lake
from lakehouse.quality import store

FAULTS = {
    "gap": 2,
    "duplicate": 2,
    "reorder": 1,
    "malformed_json": 2,
    "missing_field": 1,
    "wrong_type": 1,
    "oversize": 1,
    "null_key": 2,
}


def quarantined_rows(spark: SparkSession, storage: StorageSettings) -> list[Row]:
    return store.quarantined_rows(
        spark, storage, sensor_records.NAME, sensor_records.TABLE.columns
    ).collect()


consume_all = lake.kafka_records
as_tuples = lake.as_tuples
