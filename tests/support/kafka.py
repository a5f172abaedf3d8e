"""Kafka records as the broker holds them and as bronze keeps them, and the faults to send."""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import Row, SparkSession

from bronze import sensor_records
from lakehouse.quality import store
from lakehouse.settings import StorageSettings

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
    """Every record under the prefix, read back by a plain Kafka consumer."""
    topics = [
        t
        for t in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
        if t.startswith(prefix)
    ]
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"check-{prefix}", "enable.auto.commit": False}
    )
    records: set[tuple] = set()
    for topic in topics:
        for partition in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            consumer.assign([TopicPartition(topic, partition, low)])
            for _ in range(high - low):
                message = consumer.poll(5)
                assert message is not None and message.error() is None
                headers = tuple((k, bytes(v)) for k, v in (message.headers() or []))
                records.add(
                    (topic, partition, message.offset(), message.key(), message.value(), headers)
                )
    consumer.close()
    return records


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
