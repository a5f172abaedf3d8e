"""What game day reads to judge a step: the records Kafka holds under its prefix, and the
namespace's bronze, silver and gold in the shapes `reconcile` compares."""

from __future__ import annotations

import time
from typing import Any

from pyspark.sql import Row, SparkSession
from pyspark.sql import functions as F

from bronze import sensor_records
from gold import sensor_daily, sensor_hourly, session_summary
from lakehouse.core.settings import Settings, StorageSettings
from lakehouse.definitions import READERS
from lakehouse.gameday import gold_reference, reconcile, reference
from lakehouse.gameday.reconcile import KafkaRecord, Tally
from lakehouse.gameday.reference import Expected
from lakehouse.quality import store
from lakehouse.storage import catalog, model_runs
from silver import row_changes, session_rows, sessions, violations


def kafka_records(
    bootstrap: str, prefix: str, options: dict[str, str] | None = None
) -> set[KafkaRecord]:
    """Every record under the prefix, read back by a plain Kafka consumer.

    Every partition is assigned at once and read in bulk: a partition at a time, each
    assignment waited for its first fetch, and reading 306 records of 18 partitions took
    19 s instead of 1."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    config: dict[str, Any] = {"bootstrap.servers": bootstrap, **(options or {})}
    topics = AdminClient(config).list_topics(timeout=10).topics
    consumer = Consumer({**config, "group.id": f"check-{prefix}", "enable.auto.commit": False})
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
        records: set[KafkaRecord] = set()
        deadline = time.monotonic() + 60
        while ends:
            if time.monotonic() > deadline:
                raise TimeoutError(f"records of {sorted(ends)} never came from {bootstrap}")
            message: Any
            for message in consumer.consume(1000, timeout=1):
                if message.error() is not None:
                    raise RuntimeError(str(message.error()))
                at = (message.topic(), message.partition())
                headers = tuple((k, bytes(v)) for k, v in (message.headers() or []))
                records.add((*at, message.offset(), message.key(), message.value(), headers))
                if message.offset() + 1 >= ends.get(at, 0):
                    ends.pop(at, None)
        return records
    finally:
        consumer.close()


def as_tuples(rows: list[Row]) -> list[KafkaRecord]:
    """Bronze's rows as Kafka records."""
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


def quarantined_rows(spark: SparkSession, storage: StorageSettings) -> list[Row]:
    """The rows bronze's gate set aside (keyless, valueless, oversize)."""
    return store.quarantined_rows(
        spark, storage, sensor_records.NAME, sensor_records.TABLE.columns
    ).collect()


def bronze_records(spark: SparkSession, settings: Settings) -> list[KafkaRecord]:
    """Every record bronze holds: its table's and its quarantine's."""
    table = spark.read.format("delta").load(settings.storage.table_uri(sensor_records.NAME))
    return as_tuples(table.collect()) + as_tuples(quarantined_rows(spark, settings.storage))


def silver_found(spark: SparkSession, settings: Settings) -> Expected:
    """Silver's tables in the reference's shape, every row of each (a row twice is there
    twice), times as microseconds since the epoch."""

    def table(name: str, *times: str) -> list[Row]:
        frame = spark.read.format("delta").load(settings.storage.table_uri(name))
        return frame.withColumns({t: F.unix_micros(t) for t in times}).collect()

    found = Expected()
    for r in table(session_rows.NAME):
        values = tuple(r[f] for f in reference.ROW_FIELDS)
        found.rows.append(
            (((r.topic, r.session_id), r.row_id), (*values, r.seq, r.topic, r.partition, r.offset))
        )
    for r in table(sessions.NAME, "first_event_time", "last_event_time"):
        found.sessions.append(((r.topic, r.session_id), reference.SessionSummary(
            r.sensor_id, r.status, r.first_seq, r.last_seq, r.records, r.snapshots, r.updates,
            r.rejected, r.gaps, r.table_rows, r.first_event_time, r.last_event_time,
            (r.first_topic, r.first_partition, r.first_offset), (r.topic, r.partition, r.offset),
        )))  # fmt: skip
    for r in table(violations.NAME):
        session = None if r.session_id is None else (r.topic, r.session_id)
        found.violations.append(((session, r.reason, r.topic, r.partition, r.offset), ()))
    for r in table(row_changes.NAME, "event_time"):
        values = tuple(r[f] for f in reference.ROW_FIELDS)
        found.changes.append((
            ((r.topic, r.session_id), r.row_id, r.op, r.seq),
            (*values, r.sensor_id, r.event_time, r.topic, r.partition, r.offset),
        ))  # fmt: skip
    return found


def gold_tally(spark: SparkSession, settings: Settings, expected: Expected) -> Tally:
    """Each gold model's rows against gold computed with pandas from `expected`, silver as
    the reference rebuilt it from what was sent (never from silver's own columns)."""

    def table(name: str) -> Any:
        return spark.read.format("delta").load(settings.storage.table_uri(name))

    changes, summaries, rejections = gold_reference.silver_frames(expected)
    wanted = {
        sensor_hourly: gold_reference.hourly_reference(changes),
        sensor_daily: gold_reference.daily_reference(changes),
        session_summary: gold_reference.summary_reference(summaries, rejections),
    }
    tallies = [
        reconcile.rows_vs_reference(
            model.NAME, [r.asDict() for r in table(model.NAME).collect()], model.KEY, rows
        )
        for model, rows in wanted.items()
    ]
    return reconcile.combined("silver ↔ gold", tallies)


def written_mark(spark: SparkSession, settings: Settings) -> tuple[int, ...]:
    """What the pipeline has written that moves its readers, from listings alone (no Spark
    job): the files of each read table's Delta log, of gold's model runs' log and of each
    reading stream's checkpoint commits. Where a reader stands, and how far behind its
    table it is, changes only when one of these does."""
    folders = [settings.storage.table_uri(t) + "/_delta_log" for t in {r.table for r in READERS}]
    folders.append(settings.storage.table_uri(model_runs.RUNS.name) + "/_delta_log")
    folders += [
        settings.storage.checkpoint_uri(r.checkpoint) + "/commits"
        for r in READERS
        if r.checkpoint is not None
    ]
    mark = []
    for uri in sorted(folders):
        fs, path = catalog.hadoop_fs(spark, uri)
        mark.append(len(fs.listStatus(path)) if fs.exists(path) else -1)
    return tuple(mark)
