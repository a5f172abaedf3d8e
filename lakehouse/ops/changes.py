"""`lakehouse bronze accept-*` and `bronze changes`: a change in Kafka accepted (bronze
commits the batch that skips it), and those accepted, as lines."""

from __future__ import annotations

from dataclasses import asdict

from pyspark.sql import SparkSession

from bronze import kafka_changes, sensor_records
from lakehouse.core.settings import Settings


def accept(
    spark: SparkSession,
    settings: Settings,
    change: str,
    topic: str,
    partition: int | None,
    reason: str | None,
) -> list[str]:
    """Accept `change` of `topic` (or of one of its partitions) and say what was accepted."""
    accepted = sensor_records.accept_kafka_change(spark, settings, change, topic, partition, reason)
    if accepted.finished:
        head = (
            f"{kafka_changes.NAME}: finished the change recorded for bronze batch "
            f"{accepted.batch} by a command cut short; nothing more to accept:"
        )
    else:
        head = f"{kafka_changes.NAME}: accepted in bronze batch {accepted.batch}:"
    return [head] + [f"  {kafka_changes.describe(asdict(c))}" for c in accepted.changes]


def accepted(spark: SparkSession, settings: Settings) -> list[str]:
    """Every change accepted, a line each."""
    found = kafka_changes.history(spark, settings)
    return [f"{kafka_changes.NAME}: {len(found)} partitions changed"] + [
        f"  batch {row['bronze_batch']}: {kafka_changes.describe(row)}" for row in found
    ]
