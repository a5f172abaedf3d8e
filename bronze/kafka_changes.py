"""bronze.kafka_changes: one row per partition of a change in what Kafka serves that an
operator accepted, and the commands that accept one.

Bronze stops, never skips, when Kafka changes under it; each way on is the operator's:
- offsets bronze has not read are gone (retention, `delete_records`):
  `lakehouse bronze accept-loss TOPIC PARTITION` resumes at Kafka's earliest offset;
- a topic is gone (a sensor decommissioned): `lakehouse bronze retire-topic TOPIC` lets
  the other topics go on;
- a topic was deleted and made again under its name, its offsets starting again below
  what bronze read (or a retired topic came back): `lakehouse bronze accept-recreated
  TOPIC` reads the new incarnation from its earliest offset. Its rows are written under
  the topic `TOPIC~N` (`~` is never in a Kafka topic's name), so that the lineage
  (topic, partition, offset) of its records never meets the old incarnation's.

An accepted change is recorded here first, then made a batch of the bronze stream that
reads nothing and ends where bronze goes on (`positions.commit_kafka_position`): every
row bronze holds stays, once, and what it skipped is named here, by whom and when.
"""

from __future__ import annotations

import getpass
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings
from lakehouse.core.tables import TableSpec
from lakehouse.storage import catalog, delta, positions

INCARNATION = "~"
"""Bronze names the N-th incarnation of a re-created topic `TOPIC~N` (N > 1)."""


def incarnation_topic(topic: str, incarnation: int) -> str:
    """The topic bronze's rows name for `incarnation` of Kafka's `topic`."""
    return topic if incarnation == 1 else f"{topic}{INCARNATION}{incarnation}"


def kafka_topic(named: str) -> tuple[str, int]:
    """The Kafka topic and its incarnation that a topic of bronze's rows names."""
    topic, _, incarnation = named.partition(INCARNATION)
    return topic, int(incarnation or 1)


def kafka_topic_of(named: Column) -> Column:
    """`kafka_topic`'s topic, of a column."""
    return F.regexp_replace(named, f"{INCARNATION}[0-9]+$", "")


TABLE = TableSpec(
    name="bronze.kafka_changes",
    grain="one row per partition of a change in Kafka an operator accepted",
    columns="""
        change STRING NOT NULL
            COMMENT 'what changed: offsets_lost, topic_retired or topic_recreated',
        topic STRING NOT NULL COMMENT 'Kafka topic that changed, as Kafka names it',
        partition INT NOT NULL COMMENT 'Kafka partition of the topic',
        skipped_from BIGINT
            COMMENT 'first offset bronze had not read and skipped; null if it had read none',
        skipped_to BIGINT
            COMMENT 'last offset skipped; null when the rest of a gone incarnation is skipped',
        resumed_at BIGINT
            COMMENT 'offset bronze reads next in the partition; null when it reads no more',
        incarnation INT NOT NULL
            COMMENT 'incarnation of the topic read after the change: 1 until it is re-created',
        bronze_batch BIGINT NOT NULL
            COMMENT 'batch of the bronze stream that skipped (it reads no records)',
        checkpoint_id STRING NOT NULL
            COMMENT 'id of the bronze checkpoint that batch is of (a rebuilt bronze has another)',
        accepted_by STRING NOT NULL COMMENT 'user who accepted the change',
        accepted_at TIMESTAMP NOT NULL COMMENT 'when it was accepted (UTC)',
        reason STRING COMMENT 'why, in the words of whoever accepted it'
    """,
    writer="lakehouse bronze accept-loss | retire-topic | accept-recreated",
)
NAME = TABLE.name

Position = Mapping[tuple[str, int], int]
"""(topic, partition) -> the next offset bronze reads."""
Watermarks = Mapping[tuple[str, int], tuple[int, int]]
"""(topic, partition) -> (earliest, end) offsets Kafka holds."""


@dataclass(frozen=True)
class Change:
    """What accepting a change does to one partition."""

    change: str
    topic: str
    partition: int
    skipped_from: int | None
    skipped_to: int | None
    resumed_at: int | None
    incarnation: int


@dataclass(frozen=True)
class Topics:
    """What the accepted changes say of the topics: the incarnation bronze reads of each
    re-created topic, and the retired ones with the batch that retired them."""

    incarnations: Mapping[str, int]
    retired: Mapping[str, int]

    def lineage_topic(self) -> Column:
        """The topic a bronze row names: `TOPIC~N` for the N-th incarnation of a topic."""
        topic = F.col("topic")
        for name, incarnation in sorted(self.incarnations.items()):
            named = F.lit(incarnation_topic(name, incarnation))
            topic = F.when(F.col("topic") == name, named).otherwise(topic)
        return topic


NONE = Topics({}, {})
"""No change accepted: every topic read as Kafka names it."""


def lost_offsets(
    position: Position, kafka: Watermarks, topic: str, partition: int, incarnation: int
) -> list[Change]:
    """Skip what Kafka no longer holds of a partition: from where bronze stands (offset 0
    for a partition it has not read) to Kafka's earliest offset."""
    if (topic, partition) not in kafka:
        raise LakehouseError(f"Kafka has no partition {partition} of topic {topic}")
    read_to = position.get((topic, partition), 0)
    earliest, _ = kafka[(topic, partition)]
    if earliest <= read_to:
        raise LakehouseError(
            f"nothing of {topic} partition {partition} is lost: bronze reads offset "
            f"{read_to:,} next and Kafka holds offsets from {earliest:,}"
        )
    return [Change("offsets_lost", topic, partition, read_to, earliest - 1, earliest, incarnation)]


def retired_topic(
    position: Position, planned: Position, kafka: Watermarks, topic: str, incarnation: int
) -> list[Change]:
    """Stop reading a topic that is gone from Kafka, with whatever it held that bronze had
    not read; refused while Kafka still has it (bronze would read it again from offset 0)."""
    if any(t == topic for t, _ in kafka):
        raise LakehouseError(
            f"topic {topic} is still in Kafka: retire a topic once it is deleted (a retired "
            "topic that is still there would be read again from its first offset)"
        )
    partitions = sorted({p for t, p in (*position, *planned) if t == topic})
    if not partitions:
        raise LakehouseError(f"bronze reads no topic {topic}: nothing to retire")
    return [
        Change("topic_retired", topic, p, position.get((topic, p)), None, None, incarnation)
        for p in partitions
    ]


def recreated_topic(
    position: Position, kafka: Watermarks, topic: str, retired: bool, incarnation: int
) -> list[Change]:
    """Read a topic made again under an old name as its next incarnation, from its
    earliest offsets; refused unless it is known to be new: it was retired, or one of its
    partitions ends below where bronze stands in it."""
    now = {p: ends for (t, p), ends in kafka.items() if t == topic}
    if not now:
        raise LakehouseError(f"topic {topic} is not in Kafka")
    went_back = [p for p, (_, end) in now.items() if end < position.get((topic, p), 0)]
    if not retired and not went_back:
        raise LakehouseError(
            f"topic {topic} does not look re-created: none of its partitions ends below "
            "where bronze stands in it, and it was not retired"
        )
    old = {p for t, p in position if t == topic}
    return [
        Change(
            "topic_recreated",
            topic,
            p,
            position.get((topic, p)),
            None,
            now[p][0] if p in now else None,
            incarnation + 1,
        )
        for p in sorted(old | set(now))
    ]


def moved(position: Position, changes: Sequence[Change]) -> dict[tuple[str, int], int]:
    """Where bronze stands once `changes` are made."""
    after = dict(position)
    for c in changes:
        if c.resumed_at is None:
            after.pop((c.topic, c.partition), None)
        else:
            after[(c.topic, c.partition)] = c.resumed_at
    return after


def topics(spark: SparkSession, settings: Settings, checkpoint: str) -> Topics:
    """What the changes accepted for bronze's present `checkpoint` say of the topics."""
    location = settings.storage.table_uri(NAME)
    if not catalog.is_delta(spark, location):
        return NONE
    fields = ("change", "topic", "incarnation", "bronze_batch", "checkpoint_id")
    recorded = spark.read.format("delta").load(location).select(*fields).collect()
    return topics_of([r.asDict() for r in recorded], positions.checkpoint_id(spark, checkpoint))


def topics_of(recorded: Iterable[Mapping[str, Any]], checkpoint_id: str | None) -> Topics:
    """What `recorded` changes say of the topics, each topic by its latest change: only
    those made for the checkpoint `checkpoint_id`. A `--full-refresh` reads Kafka again on
    a new checkpoint, numbering its batches from 0: changes made for the one it replaced
    would outrank newer ones, and describe a reading of Kafka that is gone."""
    latest: dict[str, Mapping[str, Any]] = {}
    for change in sorted(
        (c for c in recorded if c["checkpoint_id"] == checkpoint_id),
        key=lambda c: c["bronze_batch"],
    ):
        latest[change["topic"]] = change
    return Topics(
        {t: c["incarnation"] for t, c in latest.items() if c["incarnation"] > 1},
        {t: c["bronze_batch"] for t, c in latest.items() if c["change"] == "topic_retired"},
    )


def finish(spark: SparkSession, settings: Settings, checkpoint: str) -> list[Change]:
    """The changes recorded but not committed (their command was cut short between the
    two), committed now: bronze then goes on as the record says."""
    stands = positions.kafka_checkpoint(spark, checkpoint)
    location = settings.storage.table_uri(NAME)
    if stands is None or not catalog.is_delta(spark, location):
        return []
    unfinished = (
        spark.read.format("delta")
        .load(location)
        .where(
            (F.col("checkpoint_id") == stands.query_id) & (F.col("bronze_batch") > stands.committed)
        )
    )
    recorded = [Change(*(r[f] for f in Change.__dataclass_fields__)) for r in unfinished.collect()]
    if recorded:
        positions.commit_kafka_position(spark, checkpoint, moved(stands.position, recorded))
    return recorded


def record(
    spark: SparkSession,
    location: str,
    changes: Sequence[Change],
    batch: int,
    checkpoint_id: str,
    reason: str | None,
) -> None:
    accepted = {
        "bronze_batch": batch,
        "checkpoint_id": checkpoint_id,
        "accepted_by": getpass.getuser(),
        "reason": reason,
    }
    now = datetime.now(UTC)
    rows = [{**asdict(c), **accepted, "accepted_at": now} for c in changes]
    schema = spark.read.format("delta").load(location).schema
    delta.append(spark.createDataFrame(rows, schema), location)


def history(spark: SparkSession, settings: Settings) -> list[dict[str, Any]]:
    """Every accepted change, the latest first."""
    location = settings.storage.table_uri(NAME)
    if not catalog.is_delta(spark, location):
        return []
    rows = (
        spark.read.format("delta")
        .load(location)
        .orderBy(F.desc("accepted_at"), F.desc("bronze_batch"), "topic", "partition")
    )
    return [r.asDict() for r in rows.collect()]


def describe(change: Mapping[str, Any]) -> str:
    """One change as a person reads it."""
    where = f"{change['topic']}/{change['partition']}"
    skipped_from, skipped_to = change["skipped_from"], change["skipped_to"]
    if skipped_from is None:
        skipped = "nothing read before"
    elif skipped_to is None:
        skipped = f"skipped from offset {skipped_from:,} on"
    else:
        skipped = f"skipped offsets {skipped_from:,}..{skipped_to:,}"
    resumed = change["resumed_at"]
    goes_on = "read no more" if resumed is None else f"reads from {resumed:,}"
    incarnation = f" (incarnation {change['incarnation']})" if change["incarnation"] > 1 else ""
    by = ""
    if "accepted_by" in change:
        by = f", by {change['accepted_by']} at {change['accepted_at']:%Y-%m-%d %H:%M:%S}"
        by += f": {change['reason']}" if change.get("reason") else ""
    return f"{change['change']:<16} {where}: {skipped}, {goes_on}{incarnation}{by}"
