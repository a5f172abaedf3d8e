"""bronze.sensor_records against a real broker, real Spark and real Delta tables."""

from __future__ import annotations

import getpass
import shutil
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from bronze import kafka_changes, sensor_records
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings, load_settings
from lakehouse.ops.producer import MAX_VALUE_BYTES, TrafficSpec, produce
from lakehouse.runtime.streams import StreamRun
from lakehouse.services.kafka import EmbeddedKafka, client_options, watermarks
from lakehouse.storage import catalog, delta, positions
from silver.parsing import keyed_records
from tests.support import overrides, run_lakehouse, settings_for
from tests.support.kafka import FAULTS, as_tuples, consume_all, quarantined_rows
from tests.support.silver import silver_tables

pytestmark = pytest.mark.integration

BASE_SPEC = TrafficSpec(
    seed=11,
    sensors=3,
    sessions_per_sensor=3,
    rows_per_snapshot=50,
    updates_per_session=60,
    partitions=2,
)


def spec(prefix: str, **fields: Any) -> TrafficSpec:
    return replace(BASE_SPEC, topic_prefix=prefix, **fields)


def bronze_rows(spark: SparkSession, path: str) -> list[tuple]:
    return as_tuples(spark.read.format("delta").load(path).collect())


def test_bronze_holds_every_record_exactly_once_byte_for_byte(
    spark: SparkSession, kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = "exact.sensors."
    report = produce(
        spec(prefix, sessions_per_sensor=6, updates_per_session=40, faults=FAULTS), kafka_bootstrap
    )
    settings = settings_for(tmp_path, kafka_bootstrap, prefix)

    sensor_records.run(spark, settings)

    rows = bronze_rows(spark, settings.storage.table_uri("bronze.sensor_records"))
    quarantined = quarantined_rows(spark, settings.storage)
    caught = [r.expectation for r in quarantined]
    every = rows + as_tuples(quarantined)
    # The sets first: a failure lists the very records lost or made up, not only a count,
    # and says whether Spark planned short of Kafka's ends or skipped inside its plan.
    assert set(every) == consume_all(kafka_bootstrap, prefix), _where_bronze_read(spark, settings)
    assert len(every) == report.records == 18 * 42 - FAULTS["gap"] + FAULTS["duplicate"]
    assert len({r[:3] for r in every}) == len(every), "(topic, partition, offset) must be unique"
    assert {(t, p) for t, p, *_ in rows} == {
        (f"{prefix}sensor-00{i}", p) for i in (1, 2, 3) for p in (0, 1)
    }
    # The suite quarantines what the protocol forbids; everything else lands in the table.
    assert sorted(caught) == sorted(
        ["key_present"] * FAULTS["null_key"] + ["value_within_size_bound"] * FAULTS["oversize"]
    )
    assert all(r[3] is not None and len(r[4]) <= MAX_VALUE_BYTES for r in rows)
    assert sum(sensor_records.rows_by_topic(spark, settings).values()) == len(rows)


def _where_bronze_read(spark: SparkSession, settings: Settings) -> str:
    checkpoint = settings.storage.checkpoint_uri(sensor_records.CHECKPOINT)
    ends = {tp: end for tp, (_, end) in watermarks(settings).items()}
    return (
        f"bronze read Kafka up to {positions.kafka_offsets(spark, checkpoint)}; it ends at {ends}"
    )


def test_second_run_ingests_only_new_records(
    spark: SparkSession, kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = "rerun.sensors."
    settings = settings_for(tmp_path, kafka_bootstrap, prefix)
    first = produce(spec(prefix, sensors=2), kafka_bootstrap)
    sensor_records.run(spark, settings)
    second = produce(spec(prefix, sensors=2, seed=12), kafka_bootstrap)

    stats = sensor_records.run(spark, settings)

    assert stats.input_rows == second.records
    assert (
        sum(sensor_records.rows_by_topic(spark, settings).values())
        == first.records + second.records
    )


def test_offsets_lost_to_retention_stop_bronze_until_the_loss_is_accepted(
    spark: SparkSession, kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = "lost.sensors."
    settings = settings_for(tmp_path, kafka_bootstrap, prefix)
    first = produce(spec(prefix, sensors=1), kafka_bootstrap)
    sensor_records.run(spark, settings)
    topic = f"{prefix}sensor-001"
    first_ends = end_offsets(kafka_bootstrap, topic)
    produce(spec(prefix, sensors=1, seed=99), kafka_bootstrap)
    ends = delete_older_half(kafka_bootstrap, topic, first_ends)

    with pytest.raises(LakehouseError) as lost:
        sensor_records.run(spark, settings)
    # The line names exactly what is gone: a partition of the topic, from where bronze
    # stands to Kafka's earliest offset, and the command that goes on without it.
    said = str(lost.value)
    assert any(
        f"offsets {first_ends[t.partition]:,}..{t.offset - 1:,} of {topic} partition {t.partition},"
        in said
        and f"`lakehouse bronze accept-loss {topic} {t.partition}`" in said
        for t in ends
    ), said
    # Nor may a rebuild from Kafka drop what bronze holds and Kafka does not.
    with pytest.raises(LakehouseError, match=rf"refusing to rebuild bronze.*{topic}/0"):
        sensor_records.run(spark, settings, StreamRun(full_refresh=True))
    path = settings.storage.table_uri("bronze.sensor_records")
    assert spark.read.format("delta").load(path).count() == first.records

    # Accepted, partition by partition, the loss is recorded and bronze goes on from
    # Kafka's earliest offsets with what comes after: every record exactly once.
    produce(spec(prefix, sensors=1, seed=7), kafka_bootstrap)
    # The first acceptance is cut short between its record and its commit; run again, it
    # finishes what it recorded and says so.
    with monkeypatch.context() as cut:
        cut.setattr(positions, "commit_kafka_position", _cut_short)
        with pytest.raises(CutShort):
            sensor_records.accept_kafka_change(spark, settings, "offsets_lost", topic, 0, "test")
    again = sensor_records.accept_kafka_change(spark, settings, "offsets_lost", topic, 0, "test")
    assert again.finished and [c.partition for c in again.changes] == [0]
    for tp in ends[1:]:
        sensor_records.accept_kafka_change(spark, settings, "offsets_lost", topic, tp.partition)
    with pytest.raises(LakehouseError, match=f"nothing of {topic} partition 0 is lost"):
        sensor_records.accept_kafka_change(spark, settings, "offsets_lost", topic, 0)
    sensor_records.run(spark, settings)

    last_ends = end_offsets(kafka_bootstrap, topic)
    assert offsets_held(spark, path) == sorted(
        (topic, t.partition, o)
        for t in ends
        for o in [*range(first_ends[t.partition]), *range(t.offset, last_ends[t.partition])]
    )
    recorded = kafka_changes.history(spark, settings)
    assert sorted(
        (r["change"], r["partition"], r["skipped_from"], r["skipped_to"], r["resumed_at"])
        for r in recorded
    ) == [
        ("offsets_lost", t.partition, first_ends[t.partition], t.offset - 1, t.offset) for t in ends
    ]
    assert {r["accepted_by"] for r in recorded} == {getpass.getuser()}


def test_a_topic_gone_or_made_again_stops_bronze_until_the_operator_says_how_to_go_on(
    spark: SparkSession, kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = "gone.sensors."
    settings = settings_for(tmp_path, kafka_bootstrap, prefix)
    path = settings.storage.table_uri("bronze.sensor_records")
    kept, gone = f"{prefix}sensor-001", f"{prefix}sensor-002"
    produce(spec(prefix, sensors=2), kafka_bootstrap)
    sensor_records.run(spark, settings)
    expected = set(offsets_held(spark, path))

    # A sensor decommissioned: its topic deleted while the other flows.
    delete_topic(kafka_bootstrap, gone)
    produce(spec(prefix, sensors=1, seed=5), kafka_bootstrap)
    expected |= offsets_in_kafka(kafka_bootstrap, kept)
    with pytest.raises(LakehouseError, match=rf"Kafka topic {gone} is gone .*retire-topic {gone}"):
        sensor_records.run(spark, settings)
    with pytest.raises(LakehouseError, match=f"topic {kept} is still in Kafka"):
        sensor_records.accept_kafka_change(spark, settings, "topic_retired", kept)
    # As an operator does it: the command, its line, and the change recorded with its reason.
    env = overrides(tmp_path, kafka_bootstrap, prefix)
    retired = run_lakehouse("bronze", "retire-topic", gone, "--reason", "decommissioned", env=env)
    assert retired.returncode == 0, retired.stderr[-2000:]
    assert f"topic_retired    {gone}/0: skipped from offset " in retired.stdout, retired.stdout
    sensor_records.run(spark, settings)
    assert offsets_held(spark, path) == sorted(expected)

    # The retired topic made again: refused, then read as its second incarnation.
    produce(spec(prefix, sensors=2, seed=6), kafka_bootstrap)
    expected |= offsets_in_kafka(kafka_bootstrap, kept)
    with pytest.raises(LakehouseError, match=rf"topic {gone}, retired .* accept-recreated {gone}"):
        sensor_records.run(spark, settings)
    sensor_records.accept_kafka_change(spark, settings, "topic_recreated", gone)
    sensor_records.run(spark, settings)
    expected |= offsets_in_kafka(kafka_bootstrap, gone, named=f"{gone}~2")
    assert offsets_held(spark, path) == sorted(expected)

    # Deleted and made again between two runs, with fewer records than bronze read: its
    # offsets go back, and it is read from its first as the next incarnation.
    delete_topic(kafka_bootstrap, kept)
    produce(spec(prefix, sensors=1, seed=8, sessions_per_sensor=1), kafka_bootstrap)
    with pytest.raises(LakehouseError, match=rf"Kafka topic {kept} partition \d now ends at"):
        sensor_records.run(spark, settings)
    sensor_records.accept_kafka_change(spark, settings, "topic_recreated", kept)
    sensor_records.run(spark, settings)
    expected |= offsets_in_kafka(kafka_bootstrap, kept, named=f"{kept}~2")
    assert offsets_held(spark, path) == sorted(expected)
    recorded = kafka_changes.history(spark, settings)
    assert {r["reason"] for r in recorded if r["change"] == "topic_retired"} == {"decommissioned"}
    assert sorted({(r["change"], r["topic"], r["incarnation"]) for r in recorded}) == [
        ("topic_recreated", kept, 2),
        ("topic_recreated", gone, 2),
        ("topic_retired", gone, 1),
    ]
    # Silver credits each incarnation's records to the sensor its topic names.
    parsed = keyed_records(spark.read.format("delta").load(path), prefix).collect()
    credited = {(r.topic.split("~")[0], r.sensor_id) for r in parsed}
    assert credited == {(kept, "sensor-001"), (gone, "sensor-002")}


def offsets_in_kafka(bootstrap: str, topic: str, named: str | None = None) -> set[tuple]:
    """(topic, partition, offset) of every record Kafka holds of `topic` from offset 0,
    the topic `named` as bronze names it."""
    return {
        (named or topic, partition, offset)
        for partition, end in end_offsets(bootstrap, topic).items()
        for offset in range(end)
    }


class CutShort(Exception):
    """A command killed at a chosen step."""


def delete_older_half(
    bootstrap: str, topic: str, read_up_to: dict[int, int]
) -> list[TopicPartition]:
    """As retention would: the older half of each partition's records after `read_up_to`
    (what bronze read) are deleted. Where each partition now begins."""
    ends = [
        TopicPartition(topic, p, (read_up_to[p] + end) // 2)
        for p, end in end_offsets(bootstrap, topic).items()
    ]
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until its futures are done
    for future in admin.delete_records(ends).values():
        future.result()
    return ends


def _cut_short(*_: object) -> int:
    raise CutShort


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> the offset the next record of `topic` gets."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in sorted(partitions)
        }
    finally:
        consumer.close()


def delete_topic(bootstrap: str, topic: str) -> None:
    """Delete `topic` and wait until the broker no longer lists it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result()
    deadline = time.monotonic() + 30
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"{topic} still listed 30 s after its deletion"
        time.sleep(0.2)


def offsets_held(spark: SparkSession, path: str) -> list[tuple[str, int, int]]:
    """The (topic, partition, offset) of every bronze row, duplicates kept."""
    rows = spark.read.format("delta").load(path).select("topic", "partition", "offset")
    return sorted((r.topic, r.partition, r.offset) for r in rows.collect())


def test_a_rebuild_of_bronze_replaces_it_and_silver_rebuilds_itself_after(
    spark: SparkSession, kafka_bootstrap: str, tmp_path: Path
) -> None:
    from silver import reconstruct

    prefix = "rebuild.sensors."
    settings = settings_for(
        tmp_path, kafka_bootstrap, prefix, bronze__max_offsets_per_trigger="300"
    )
    produce(spec(prefix, sensors=2), kafka_bootstrap)
    sensor_records.run(spark, settings)
    reconstruct.run(spark, settings)
    path = settings.storage.table_uri("bronze.sensor_records")
    bronze, silver = sorted(bronze_rows(spark, path)), silver_tables(spark, settings)
    # A lost checkpoint would start at Kafka's earliest offsets again: refused, not doubled.
    checkpoint = settings.storage.checkpoint_uri(sensor_records.CHECKPOINT)
    shutil.rmtree(checkpoint.removeprefix("file://"))
    with pytest.raises(LakehouseError, match="run bronze --full-refresh"):
        sensor_records.run(spark, settings)

    stats = sensor_records.run(spark, settings, StreamRun(full_refresh=True))

    assert stats.batches > 1
    assert sorted(bronze_rows(spark, path)) == bronze
    reconstruct.run(spark, settings)  # finds bronze replaced under it
    assert silver_tables(spark, settings) == silver


def test_a_table_folder_left_without_its_first_commit_becomes_the_table_on_the_next_run(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = settings_for(tmp_path, "127.0.0.1:1", "unused.").storage.table_uri(sensor_records.NAME)
    # What a job killed inside Delta's create leaves: the log's folders, no commit in them.
    (Path(path.removeprefix("file://")) / "_delta_log" / "_staged_commits").mkdir(parents=True)

    delta.create(spark, sensor_records.TABLE, path)  # what bronze's run does first

    table = spark.read.format("delta").load(path)
    assert table.schema == spark.createDataFrame([], sensor_records.TABLE.columns).schema
    assert table.count() == 0


def test_a_table_another_process_makes_after_this_one_looked_mid_create_is_seen(
    spark: SparkSession, tmp_path: Path
) -> None:
    made, seen = tmp_path / "made", tmp_path / "seen"
    # A look while another process creates the table (its log's folder, no commit yet)...
    (seen / "_delta_log" / "_staged_commits").mkdir(parents=True)
    assert not catalog.is_delta(spark, seen.as_uri())
    # ... then its commit lands, which this JVM is not told of (a shadow's silver waiting
    # on the live bronze waited for ever on Delta's cached answer).
    spark.range(3).write.format("delta").save(made.as_uri())
    shutil.copytree(made, seen, dirs_exist_ok=True)

    assert catalog.is_delta(spark, seen.as_uri())


KAFKA_PASSWORD = 'a "quoted" pass\\word\'s'
"""Quotes and a backslash: JAAS and the broker's properties file each read them as escapes."""


@pytest.fixture
def sasl_broker(tmp_path: Path) -> Iterator[EmbeddedKafka]:
    """A broker of the test's own that admits the user `sensors` over SASL_SSL."""
    broker = EmbeddedKafka(tmp_path / "kafka", users=(("sensors", KAFKA_PASSWORD),))
    broker.start()
    yield broker
    broker.stop()


def test_producer_and_bronze_connect_over_sasl_ssl_with_credentials_from_the_environment(
    spark: SparkSession, sasl_broker: EmbeddedKafka, tmp_path: Path
) -> None:
    prefix, address = "sasl.sensors.", sasl_broker.sasl_address()
    assert address is not None
    env = overrides(
        tmp_path,
        address,
        prefix,
        kafka__security__protocol="SASL_SSL",
        kafka__security__username="sensors",
        kafka__security__password="${KAFKA_PASSWORD}",
        kafka__security__ca_file=str(sasl_broker.ca_file),
    )
    settings = load_settings("local", environ={**env, "KAFKA_PASSWORD": KAFKA_PASSWORD})
    produce(spec(prefix, sensors=1), address, client_options(settings.kafka))
    sensor_records.run(spark, settings)

    # Every record, read back by a plain consumer on the broker's PLAINTEXT listener.
    path = settings.storage.table_uri("bronze.sensor_records")
    assert sorted(bronze_rows(spark, path)) == sorted(consume_all(sasl_broker.address(), prefix))
    stranger = load_settings("local", environ={**env, "KAFKA_PASSWORD": "a guess"})
    with pytest.raises(LakehouseError) as refused:
        sensor_records.run(spark, stranger)
    assert str(refused.value).startswith(
        "Kafka refused the credentials of kafka.security (user and password, mechanism, protocol): "
    ), refused.value
    assert "Invalid username or password" in str(refused.value)


def test_broker_down_fails_fast_with_one_clear_line(tmp_path: Path) -> None:
    env = overrides(tmp_path, "127.0.0.1:9", "down.sensors.")

    result = run_lakehouse("run", "bronze", env=env, timeout=120)

    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "lakehouse: error: Kafka is unreachable: 127.0.0.1:9 (Connection refused)"
    )


def test_embedded_broker_not_started_says_how_to_start_it(tmp_path: Path) -> None:
    env = overrides(tmp_path, "embedded", "none.sensors.")

    result = run_lakehouse("run", "bronze", env=env, timeout=120)

    assert result.returncode == 1
    assert "embedded Kafka broker is not running" in result.stderr
    assert "lakehouse kafka start" in result.stderr


def test_bad_settings_exit_2_naming_the_key(tmp_path: Path) -> None:
    env = overrides(tmp_path, "127.0.0.1:9", "bad.sensors.", bronze__max_offsets_per_trigger="lots")

    result = run_lakehouse("run", "bronze", env=env, timeout=60)

    assert result.returncode == 2
    assert result.stderr.strip() == (
        "lakehouse: settings error: 'bronze.max_offsets_per_trigger' in "
        "$LAKEHOUSE__BRONZE__MAX_OFFSETS_PER_TRIGGER: expected int, got str 'lots'"
    )
