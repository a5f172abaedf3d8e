"""bronze.sensor_records's transform on a few inline Kafka rows."""

from __future__ import annotations

from datetime import datetime

import pytest
from pyspark.sql import SparkSession

from bronze.sensor_records import TABLE, to_sensor_records

pytestmark = pytest.mark.integration

KAFKA = """topic STRING, partition INT, offset BIGINT, key BINARY, value BINARY,
           timestamp TIMESTAMP, timestampType INT,
           headers ARRAY<STRUCT<key: STRING, value: BINARY>>"""


def test_a_kafka_record_keeps_its_bytes_and_lineage_and_gains_its_batch(
    spark: SparkSession,
) -> None:
    sent = datetime(2026, 1, 1, 12)
    kafka = spark.createDataFrame(
        [("sensors.s1", 1, 42, b"k", b"\xff not json", sent, 0, [("producer", b"x")])], KAFKA
    )

    (row,) = to_sensor_records(kafka, 7).collect()

    assert (row.topic, row.partition, row.offset, bytes(row.key), bytes(row.value)) == (
        "sensors.s1",
        1,
        42,
        b"k",
        b"\xff not json",
    )
    assert (row.kafka_timestamp, row.batch_id, row.headers[0].key) == (sent, 7, "producer")
    assert to_sensor_records(kafka, 7).columns == TABLE.column_names
