"""Bronze tables written directly from generated traffic, in as many commits as asked."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime

from pyspark.sql import SparkSession

from bronze import sensor_records
from lakehouse.ops.producer import TrafficSpec, generate_traffic
from lakehouse.storage import delta


def kafka_records(spec: TrafficSpec) -> list[tuple[str, int, int, bytes | None, bytes]]:
    """What a broker would hold: (topic, partition, offset, key, value), offsets per partition."""
    next_offset: dict[tuple[str, int], int] = defaultdict(int)
    records = []
    for r in generate_traffic(spec):
        offset = next_offset[(r.topic, r.partition)]
        next_offset[(r.topic, r.partition)] += 1
        records.append((r.topic, r.partition, offset, r.key, r.value))
    return records


def sent_at_event_time(value: bytes) -> datetime:
    """A producer's send time (Kafka's CreateTime): the message's event time, as a sensor
    that sends as it measures would give it."""
    return datetime.fromisoformat(json.loads(value)["event_time"])


def write_bronze(
    spark: SparkSession,
    path: str,
    records: list[tuple],
    commits: int,
    rng: random.Random,
    sent_at: Callable[[bytes], datetime] | None = None,
    ingested_at: datetime | None = None,
) -> None:
    """Append the records in `commits` commits, in Kafka order across commits and shuffled
    within each, the way a Spark task layout would leave them. Kafka timestamps are
    `sent_at(value)`, or one instant for all; a commit's records were ingested at
    `ingested_at`, by default at the latest of them and those before (silver's clock
    counts no record later than its ingestion)."""
    delta.create(spark, sensor_records.TABLE, path)
    cuts = sorted(rng.sample(range(1, len(records)), commits - 1)) if commits > 1 else []
    now = datetime(2026, 1, 1, tzinfo=UTC)
    ingested = datetime.min.replace(tzinfo=UTC)
    for batch_id, (start, stop) in enumerate(zip([0, *cuts], [*cuts, len(records)], strict=True)):
        chunk = records[start:stop]
        rng.shuffle(chunk)
        sent = [sent_at(v) if sent_at else now for *_, v in chunk]
        ingested = ingested_at or max([ingested, *sent])
        rows = [
            (t, p, o, k, v, at, 0, [], ingested, batch_id)
            for (t, p, o, k, v), at in zip(chunk, sent, strict=True)
        ]
        frame = spark.createDataFrame(rows, schema=spark.read.format("delta").load(path).schema)
        frame.coalesce(1).write.format("delta").mode("append").save(path)
