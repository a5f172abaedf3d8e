"""bronze.sensor_records: one row per Kafka record, bytes untouched, with its lineage.

Bronze never parses, drops or rewrites a record: a malformed value lands exactly like a
good one, so every later layer can be rebuilt from here and every rejection traced back
to (topic, partition, offset). The one exception is what the bronze suite quarantines
(e.g. a record without a key): it goes, bytes intact, to `bronze.quarantine` instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bronze import kafka_changes
from lakehouse.core.errors import LakehouseError, offsets_lost, topics_gone
from lakehouse.core.settings import KafkaSettings, Settings
from lakehouse.core.tables import TableSpec
from lakehouse.observe import progress
from lakehouse.quality import gates, store
from lakehouse.runtime.streams import (
    TO_THE_END,
    RunStats,
    Stream,
    StreamRun,
    checkpoint_started,
    run_foreach_batch,
)
from lakehouse.services.kafka import (
    check_reachable,
    java_options,
    resolve_bootstrap,
    watermarks,
)
from lakehouse.storage import catalog, delta, lease, positions
from lakehouse.storage.delta import Txn

TABLE = TableSpec(
    name="bronze.sensor_records",
    grain="one row per Kafka record",
    columns="""
        topic STRING NOT NULL
            COMMENT 'Kafka topic of the record (prefix + sensor id), ~N for its N-th incarnation',
        partition INT NOT NULL COMMENT 'Kafka partition of the record within its topic',
        offset BIGINT NOT NULL
            COMMENT 'Kafka offset of the record in its partition; unique with topic and partition',
        key BINARY
            COMMENT 'Kafka key as sent (the session id in UTF-8); null if the record has none',
        value BINARY
            COMMENT 'Kafka value as sent, unparsed (JSON by docs/protocol.md); null if none',
        kafka_timestamp TIMESTAMP
            COMMENT 'Kafka timestamp of the record (UTC), the time silver ends sessions by',
        kafka_timestamp_type INT
            COMMENT 'kafka_timestamp kind: 0 CreateTime (producer clock), 1 LogAppendTime (broker)',
        headers ARRAY<STRUCT<key: STRING, value: BINARY>>
            COMMENT 'Kafka headers of the record in order, e.g. producer; null if it has none',
        ingested_at TIMESTAMP NOT NULL
            COMMENT 'when bronze wrote the record (UTC): the time of its micro-batch write',
        batch_id BIGINT NOT NULL
            COMMENT 'micro-batch of the bronze stream that wrote the record (its Delta txnVersion)'
    """,
    writer="the bronze stream",
    # Append-only: Delta itself refuses UPDATE and DELETE. File statistics only on the
    # columns bronze is searched by, lineage and time: min/max of opaque key and value
    # bytes would skip nothing.
    properties={
        "delta.appendOnly": "true",
        "delta.dataSkippingStatsColumns": (
            "topic,partition,offset,kafka_timestamp,ingested_at,batch_id"
        ),
    },
)
NAME = TABLE.name
CHECKPOINT = NAME
"""The stream that fills the table is named after it, and so is its checkpoint."""


def read_kafka(
    spark: SparkSession, bootstrap: str, kafka: KafkaSettings, max_offsets_per_trigger: int
) -> DataFrame:
    """The Kafka source over every topic under the prefix, from the earliest offsets."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribePattern", kafka.topic_pattern)
        .option("startingOffsets", "earliest")
        # Never skip offsets that retention removed before we read them: fail and say so.
        .option("failOnDataLoss", "true")
        .option("includeHeaders", "true")
        .option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
        # Each task reads a fixed offset range; the one that ends at the head of the log
        # otherwise waits the broker's full fetch.max.wait.ms (500 ms) for data that will
        # not come, once per task: measured, that doubled the time of a 1M-record ingest.
        .option("kafka.fetch.max.wait.ms", "20")
    )
    for key, value in java_options(kafka).items():
        reader = reader.option(f"kafka.{key}", value)
    return reader.load()


def to_sensor_records(
    kafka_records: DataFrame, batch_id: int, topics: kafka_changes.Topics = kafka_changes.NONE
) -> DataFrame:
    """One row per Kafka record: Kafka's columns as served, plus when and in which batch;
    the topic of a re-created one named with its incarnation (`kafka_changes`)."""
    records = kafka_records.select(
        topics.lineage_topic().alias("topic"),
        "partition",
        "offset",
        "key",
        "value",
        F.col("timestamp").alias("kafka_timestamp"),
        F.col("timestampType").alias("kafka_timestamp_type"),
        "headers",
    )
    return delta.stamped(
        records, ("ingested_at", "timestamp", datetime.now(UTC)), ("batch_id", "bigint", batch_id)
    )


PROGRESS = progress.progress_table("bronze").name
WRITES = (NAME, store.quarantine_table("bronze").name, store.results_table("bronze").name, PROGRESS)
"""Every table the bronze stream writes: on S3 it holds their leases while it runs."""


def run(spark: SparkSession, settings: Settings, how: StreamRun = TO_THE_END) -> RunStats:
    """Ingest to the current end of the topics (or until stopped, when continuous). A full
    refresh ingests again from Kafka's earliest offsets into a new table on a new
    checkpoint, if Kafka still holds every record bronze does."""
    bootstrap = resolve_bootstrap(settings)
    check_reachable(bootstrap)
    checkpoint = settings.storage.checkpoint_uri(CHECKPOINT)
    with lease.holding(settings, WRITES, "the bronze stream") as held:
        path = settings.storage.table_uri(NAME)
        progress_uri = _make_tables(spark, settings, checkpoint, how.full_refresh)
        gate_for = gates.stream_gates(spark, settings.quality, settings.storage, TABLE.layer)
        recorder = progress.listen(spark)
        kafka_changes.finish(spark, settings, checkpoint)
        topics = kafka_changes.topics(spark, settings, checkpoint)
        refuse_kafka_losses(spark, settings, checkpoint)

        def write(batch: DataFrame, txn: Txn) -> None:
            held.check()
            if topics.retired:
                planned = positions.kafka_batch_end(spark, checkpoint, txn.version)
                refuse_retired_topics(topics, {topic for topic, _ in planned})
            gate = gate_for(txn)
            gate.append(to_sensor_records(batch, txn.version, topics), NAME, path)
            # Spark counts a batch's input once per plan that reads the source, and a gate
            # that judges in several passes reads it more than once: each record is one row.
            if (records := gate.offered.get(NAME)) is not None:
                recorder.note(txn, input_rows=records)
            how.after_batch(txn.version, held)

        source = partial(
            read_kafka, spark, bootstrap, settings.kafka, settings.bronze.max_offsets_per_trigger
        )
        interval = settings.bronze.trigger_interval if how.continuous else None
        recorded = ("bronze", progress_uri)
        # Each batch writes every table but its progress under the batch's transaction.
        written = [settings.storage.table_uri(n) for n in WRITES if n != PROGRESS]
        return run_foreach_batch(
            spark, source, NAME, checkpoint, write, interval,
            progress_to=recorded, stop=how.stop, written=written,
        )  # fmt: skip


def _make_tables(
    spark: SparkSession, settings: Settings, checkpoint: str, full_refresh: bool
) -> str:
    """Bronze's table and progress table made where new (the progress table's URI back),
    or bronze made again for a full refresh; refused where a new checkpoint would read
    Kafka again into a table that holds records."""
    path = settings.storage.table_uri(NAME)
    # Each table waits on its first commit and the catalog, not on the other.
    made: list[Callable[[], object]] = [
        partial(progress.create, spark, settings.storage, "bronze"),
        partial(delta.create, spark, TABLE, path),
    ]
    progress_uri = str(delta.side_by_side(made)[0])
    if full_refresh:
        # The table is append-only: a rebuild is a new table (a new table id, by which
        # silver and gold see that they must rebuild too), never an overwrite.
        incarnations = kafka_changes.topics(spark, settings, checkpoint).incarnations
        refuse_a_rebuild_that_loses_records(spark, path, watermarks(settings), incarnations)
        # Its quarantine holds records of the same Kafka offsets: made again too.
        diverted = settings.storage.table_uri(store.quarantine_table(TABLE.layer).name)
        for uri in (checkpoint, path, diverted):
            fs, folder = catalog.hadoop_fs(spark, uri)
            fs.delete(folder, True)
        delta.forget_cached_tables(spark)
        delta.create(spark, TABLE, path)
    elif not checkpoint_started(spark, checkpoint) and not _empty(spark, path):
        # A new checkpoint starts at Kafka's earliest offsets: appending would hold
        # every record still in Kafka twice, replacing would lose those it dropped.
        raise LakehouseError(
            f"bronze holds records but its checkpoint {checkpoint} is new (lost or moved "
            "aside): ingest everything again from Kafka, replacing the table, with "
            "`lakehouse run bronze --full-refresh` (refused if Kafka no longer holds "
            "every record bronze does)"
        )
    return progress_uri


def refuse_kafka_losses(spark: SparkSession, settings: Settings, checkpoint: str) -> None:
    """Refuse to start where Kafka lost what bronze has not read yet, named from the broker:
    a topic bronze stands in, or its unfinished batch reads, that is gone (Spark would wait
    out its poll timeout on each of its partitions), or offsets from where bronze stands up
    to Kafka's earliest (Spark names the range of the batch it planned, which may reach
    records Kafka still holds)."""
    stands = positions.kafka_checkpoint(spark, checkpoint)
    if stands is None:
        return
    kafka = watermarks(settings)
    read = {topic for topic, _ in (*stands.position, *(stands.planned or {}))}
    if gone := sorted(read - {topic for topic, _ in kafka}):
        raise LakehouseError(topics_gone(gone))
    for (topic, partition), next_offset in sorted(stands.position.items()):
        earliest, _ = kafka.get((topic, partition), (0, 0))
        if next_offset < earliest:
            raise LakehouseError(offsets_lost(topic, partition, next_offset, earliest))


def refuse_retired_topics(topics: kafka_changes.Topics, read: set[str]) -> None:
    """Refuse a batch that would read a retired topic: one made again under its name, whose
    offsets start again among those bronze holds of the old one."""
    if back := sorted(read & topics.retired.keys()):
        raise LakehouseError(
            f"topic {back[0]}, retired in bronze batch {topics.retired[back[0]]:,}, is in "
            "Kafka again (re-created): nothing of it was read; to ingest it as a new "
            f"incarnation, `lakehouse bronze accept-recreated {back[0]}` "
            "(docs/operations.md, 'When Kafka changes under bronze')"
        )


def _empty(spark: SparkSession, path: str) -> bool:
    """Whether the table holds no record: from its log where it has no file (a new
    table), without a job; else by reading one row."""
    return delta.latest(spark, path).files == 0 or not spark.read.format("delta").load(path).take(1)


def refuse_a_rebuild_that_loses_records(
    spark: SparkSession,
    path: str,
    kafka: Mapping[tuple[str, int], tuple[int, int]],
    incarnations: Mapping[str, int],
) -> None:
    """Refuse, before anything changes, to rebuild bronze from Kafka where retention (or a
    topic's deletion) has removed records bronze holds: the rebuild would lose them.
    `kafka`: what Kafka holds (`watermarks`), only the incarnation of a re-created topic
    that `incarnations` names."""
    held = (
        spark.read.format("delta")
        .load(path)
        .groupBy("topic", "partition")
        .agg(F.min("offset").alias("first"), F.max("offset").alias("last"))
        .collect()
    )
    lost = []
    for r in sorted(held):
        topic, incarnation = kafka_changes.kafka_topic(r.topic)
        if incarnation != incarnations.get(topic, 1):
            lost.append(f"{r.topic}/{r.partition} (an incarnation Kafka no longer has)")
            continue
        low, high = kafka.get((topic, r.partition), (0, 0))  # gone: nothing
        # `high` too: a topic deleted and made again starts at 0 with fewer records.
        if not (low <= r.first and high > r.last):
            kept = f"offsets {low:,}..{high - 1:,}" if high else "nothing"
            lost.append(f"{r.topic}/{r.partition} (bronze {r.first:,}..{r.last:,}, Kafka {kept})")
    if lost:
        raise LakehouseError(
            "refusing to rebuild bronze from Kafka: Kafka no longer holds records bronze "
            f"does, which the rebuild would lose: {'; '.join(lost[:5])}"
            + (f" and {len(lost) - 5} more" if len(lost) > 5 else "")
        )


def rows_by_topic(spark: SparkSession, settings: Settings) -> dict[str, int]:
    """Rows of the table per topic."""
    path = settings.storage.table_uri(NAME)
    counts = spark.read.format("delta").load(path).groupBy("topic").count().collect()
    return {row["topic"]: row["count"] for row in sorted(counts)}


def summary(spark: SparkSession, settings: Settings, stats: RunStats) -> list[str]:
    """What a run ends with: rows per topic, and what the suite quarantined."""
    by_topic = rows_by_topic(spark, settings)
    lines = [
        f"{NAME}: {sum(by_topic.values()):,} records in {len(by_topic)} topics "
        f"(+{stats.input_rows:,} in {stats.batches} batches, {stats.seconds:.1f}s)",
        *(f"  {topic:<32} {count:>12,}" for topic, count in by_topic.items()),
    ]
    if quarantined := store.quarantine_counts(spark, settings.storage, NAME):
        pairs = ", ".join(f"{k}={v:,}" for k, v in quarantined.items())
        lines.append(f"  quarantined by its suite (bronze.quarantine): {pairs}")
    return lines


STREAM = Stream("bronze", "kafka", CHECKPOINT, WRITES, run, summary)
"""Bronze as a node of the pipeline: every Kafka record into `bronze.sensor_records`."""


def accept_kafka_change(
    spark: SparkSession,
    settings: Settings,
    change: str,
    topic: str,
    partition: int | None = None,
    reason: str | None = None,
) -> Accepted:
    """Accept one change (`offsets_lost` of a partition, `topic_retired`,
    `topic_recreated`): record it, then commit the batch that skips it. Run while bronze
    is stopped: its leases (on S3) or lock files (on local disk) make sure it is. Returns
    the batch and what it changed."""
    from lakehouse.services.kafka import watermarks

    checkpoint = settings.storage.checkpoint_uri(CHECKPOINT)
    location = settings.storage.table_uri(kafka_changes.NAME)
    with lease.holding(settings, WRITES, f"accept {change}", exclusive=True):
        stands = positions.kafka_checkpoint(spark, checkpoint)
        if stands is None:
            raise LakehouseError(
                "bronze has committed no batch yet: there is nothing to go on from; ingest "
                "everything again with `lakehouse run bronze --full-refresh`"
            )
        if stands.planned is not None and delta.holds(
            spark,
            settings.storage.table_uri(NAME),
            delta.Txn(stands.query_id, stands.committed + 1),
        ):
            raise LakehouseError(
                f"bronze wrote its batch {stands.committed + 1} but did not commit it: run "
                "bronze once more first (it commits the batch without writing it again)"
            )
        delta.create(spark, kafka_changes.TABLE, location)
        finished = kafka_changes.finish(spark, settings, checkpoint)
        if finished and all(
            c.change == change and c.topic == topic and partition in (None, c.partition)
            for c in finished
        ):
            # This very change, recorded by a command cut short before its commit.
            return Accepted(stands.committed + 1, finished, finished=True)
        stands = positions.kafka_checkpoint(spark, checkpoint) or stands
        batch, position = stands.committed + 1, stands.position
        known = kafka_changes.topics(spark, settings, checkpoint)
        incarnation = known.incarnations.get(topic, 1)
        kafka = watermarks(settings)
        if change == "offsets_lost":
            assert partition is not None
            changes = kafka_changes.lost_offsets(position, kafka, topic, partition, incarnation)
        elif change == "topic_retired":
            changes = kafka_changes.retired_topic(
                position, stands.planned or {}, kafka, topic, incarnation
            )
        else:
            changes = kafka_changes.recreated_topic(
                position, kafka, topic, topic in known.retired, incarnation
            )
        kafka_changes.record(spark, location, changes, batch, stands.query_id, reason)
        positions.commit_kafka_position(spark, checkpoint, kafka_changes.moved(position, changes))
        return Accepted(batch, changes)


@dataclass(frozen=True)
class Accepted:
    """What an acceptance did: the bronze batch it made and the partitions it changed;
    `finished`: it committed the same change, recorded by a command cut short."""

    batch: int
    changes: list[kafka_changes.Change]
    finished: bool = False
