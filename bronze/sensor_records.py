"""bronze.sensor_records: one row per Kafka record, bytes untouched, with its lineage.

Bronze never parses, drops or rewrites a record: a malformed value lands exactly like a
good one, so every later layer can be rebuilt from here and every rejection traced back
to (topic, partition, offset). The one exception is what the bronze suite quarantines
(e.g. a record without a key): it goes, bytes intact, to `bronze.quarantine` instead.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse import catalog, quality
from lakehouse.kafka_source import check_reachable, resolve_bootstrap
from lakehouse.settings import KafkaSettings, Settings
from lakehouse.streaming import RunStats, Txn, append, run_foreach_batch

LAYER, TABLE = "bronze", "sensor_records"
NAME = f"{LAYER}.{TABLE}"

COLUMNS = """
    topic STRING NOT NULL,
    partition INT NOT NULL,
    offset BIGINT NOT NULL,
    key BINARY,
    value BINARY,
    kafka_timestamp TIMESTAMP,
    kafka_timestamp_type INT,
    headers ARRAY<STRUCT<key: STRING, value: BINARY>>,
    ingested_at TIMESTAMP NOT NULL,
    batch_id BIGINT NOT NULL
"""


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
    for key, value in kafka.options.items():
        reader = reader.option(f"kafka.{key}", value)
    return reader.load()


def to_sensor_records(kafka_records: DataFrame, batch_id: int) -> DataFrame:
    """One row per Kafka record: Kafka's columns as served, plus when and in which batch."""
    return kafka_records.select(
        "topic",
        "partition",
        "offset",
        "key",
        "value",
        F.col("timestamp").alias("kafka_timestamp"),
        F.col("timestampType").alias("kafka_timestamp_type"),
        "headers",
        F.current_timestamp().alias("ingested_at"),
        F.lit(batch_id).cast("bigint").alias("batch_id"),
    )


def create_table(spark: SparkSession, path: str) -> None:
    """Create the table if missing; append-only, so Delta itself refuses UPDATE and DELETE."""
    # File statistics only on the columns bronze is searched by: lineage and time. Min/max
    # of opaque key and value bytes would skip nothing.
    properties = {
        "delta.appendOnly": "true",
        "delta.dataSkippingStatsColumns": (
            "topic,partition,offset,kafka_timestamp,ingested_at,batch_id"
        ),
    }
    catalog.create_table(spark, NAME, path, COLUMNS, properties)


def run(spark: SparkSession, settings: Settings, continuous: bool = False) -> RunStats:
    """Ingest to the current end of the topics (or until stopped, with `continuous`)."""
    bootstrap = resolve_bootstrap(settings)
    check_reachable(bootstrap)
    path = settings.storage.table_uri(LAYER, TABLE)
    create_table(spark, path)
    gate_for = quality.stream_gates(spark, settings.quality, settings.storage.root, LAYER)

    def write(batch: DataFrame, txn: Txn) -> None:
        records = to_sensor_records(batch, txn.version)
        if settings.quality.validate_streams:
            records.persist()  # validation scans the batch once per metric: read Kafka once
        try:
            gate = gate_for(txn)
            admitted = gate.admit(records, NAME)
            gate.commit()
            append(admitted, path, txn)
        finally:
            records.unpersist()

    source = read_kafka(spark, bootstrap, settings.kafka, settings.bronze.max_offsets_per_trigger)
    interval = settings.bronze.trigger_interval if continuous else None
    return run_foreach_batch(
        source, NAME, settings.storage.checkpoint_uri(LAYER, TABLE), write, interval
    )


def rows_by_topic(spark: SparkSession, settings: Settings) -> dict[str, int]:
    """Rows of the table per topic, for the summary a run ends with."""
    path = settings.storage.table_uri(LAYER, TABLE)
    counts = spark.read.format("delta").load(path).groupBy("topic").count().collect()
    return {row["topic"]: row["count"] for row in sorted(counts)}
