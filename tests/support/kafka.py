"""Kafka records as the broker holds them and as bronze keeps them, and the faults to send."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import Row, SparkSession

from bronze import sensor_records
from lakehouse.core.settings import StorageSettings
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


def consume_all(bootstrap: str, prefix: str) -> set[tuple]:
    """Every record under the prefix, read back by a plain Kafka consumer.

    Every partition is assigned at once and read in bulk: a partition at a time, each
    assignment waited for its first fetch, and reading 306 records of 18 partitions took
    19 s instead of 1."""
    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"check-{prefix}", "enable.auto.commit": False}
    )
    try:
        starts, ends = [], {}  # ends: (topic, partition) -> its high watermark, until read
        for topic in (t for t in topics if t.startswith(prefix)):
            for partition in topics[topic].partitions:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=10
                )
                if high > low:
                    starts.append(TopicPartition(topic, partition, low))
                    ends[(topic, partition)] = high
        consumer.assign(starts)
        records: set[tuple] = set()
        deadline = time.monotonic() + 60
        while ends:
            assert time.monotonic() < deadline, f"records of {sorted(ends)} never came"
            for message in consumer.consume(1000, timeout=1):
                assert message.error() is None, message.error()
                at = (message.topic(), message.partition())
                headers = tuple((k, bytes(v)) for k, v in (message.headers() or []))
                records.add((*at, message.offset(), message.key(), message.value(), headers))
                if message.offset() + 1 >= ends.get(at, 0):
                    ends.pop(at, None)
        return records
    finally:
        consumer.close()


def quarantined_rows(spark: SparkSession, storage: StorageSettings) -> list[Row]:
    return store.quarantined_rows(
        spark, storage, sensor_records.NAME, sensor_records.TABLE.columns
    ).collect()


def as_tuples(rows: list[Row]) -> list[tuple]:
    return [
        (
            r.topic,
            r.partition,
            r.offset,
            None if r.key is None else bytes(r.key),
            bytes(r.value),
            tuple((h.key, bytes(h.value)) for h in r.headers),
        )
        for r in rows
    ]
