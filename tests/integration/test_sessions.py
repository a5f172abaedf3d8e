"""Sessions in operation (real Spark, Delta): a session is (sensor, session id), it lives
and ends in the data's time, what a sensor can make silver hold is bounded, and a rebuild
replaces silver's tables rather than adding to them."""

from __future__ import annotations

import json
import random
import shutil
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bronze import sensor_records
from lakehouse.core.settings import Settings
from lakehouse.definitions import MODELS
from lakehouse.gameday import reference
from lakehouse.ops.producer import create_topics
from lakehouse.quality import store
from lakehouse.runtime.incremental import run_models
from lakehouse.runtime.streams import StreamRun
from silver import reconstruct
from tests.support import settings_for
from tests.support.bronze_tables import kafka_records, sent_at_event_time, write_bronze
from tests.support.gold import assert_gold_equals_pandas_from_silver
from tests.support.silver import assert_matches, only, silver_tables, small_spec

pytestmark = pytest.mark.integration

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def message(session: str, sensor: str, seq: int, second: float, kind: str = "update") -> bytes:
    """A clean message of the protocol, sent at T0 + `second`."""
    body: dict[str, object] = {
        "session_id": session,
        "sensor_id": sensor,
        "seq": seq,
        "kind": kind,
        "event_time": (T0 + timedelta(seconds=second)).isoformat().replace("+00:00", "Z"),
    }
    values = {"temperature": 20.0 + seq, "status": "ok"}
    if kind == "snapshot":
        body["rows"] = [{"row_id": "r0", "values": values}]
    elif kind == "update":
        body["op"], body["row"] = "upsert", {"row_id": f"r{seq % 3}", "values": values}
    return json.dumps(body).encode()


def on_a_short_clock(tmp_path: Path, timeout_seconds: int, **keys: str) -> Settings:
    """Settings whose sessions end after `timeout_seconds` of Kafka time, 2 s lateness."""
    return settings_for(
        tmp_path,
        "127.0.0.1:9",
        "sensors.",
        silver__session_timeout_seconds=str(timeout_seconds),
        silver__allowed_lateness_seconds="2",
        **keys,
    )


def table(spark: SparkSession, s: Settings, name: str) -> list:  # type: ignore[type-arg]
    return spark.read.format("delta").load(s.storage.table_uri(name)).collect()


def test_two_sensors_that_number_their_sessions_alike_keep_two_sessions(
    spark: SparkSession, tmp_path: Path
) -> None:
    s = settings_for(tmp_path, "127.0.0.1:9", "sensors.")
    first = kafka_records(small_spec(31, {}, sensors=1))
    # The same session ids on a second sensor's topic, clean, interleaved with the first's.
    twin = [
        ("sensors.twin", p, o, k, v.replace(b'"sensor_id":"sensor-001"', b'"sensor_id":"twin"'))
        for _, p, o, k, v in first
    ]
    records = [r for pair in zip(first, twin, strict=True) for r in pair]
    write_bronze(spark, s.storage.table_uri("bronze.sensor_records"), records, 1, random.Random(1))

    reconstruct.run(spark, s)

    found = silver_tables(spark, s)
    assert_matches(
        found,
        reference.reconstruct([(t, p, o, v) for t, p, o, _, v in records], s.kafka.topic_prefix),
    )
    assert not found.violations
    sessions = Counter(r.session_id for r in table(spark, s, "silver.sessions"))
    assert set(sessions.values()) == {2} and len(sessions) == 3  # three ids, two sensors each
    run_models(spark, s.storage, MODELS)
    assert_gold_equals_pandas_from_silver(spark, s)


def test_a_pipeline_stopped_longer_than_the_timeout_changes_no_answer(
    spark: SparkSession, tmp_path: Path
) -> None:
    s = on_a_short_clock(
        tmp_path, 5, silver__max_files_per_trigger="1", quality__validate_streams="false"
    )
    # Records ~1 s apart within a session, sent at their event time: no session is ever
    # quiet for 5 s in its own time.
    records = kafka_records(small_spec(32, {}, sensors=2, sessions_per_sensor=3))
    bronze = s.storage.table_uri("bronze.sensor_records")
    third = len(records) // 3
    write_bronze(spark, bronze, records[:third], 1, random.Random(2), sent_at_event_time)
    reconstruct.run(spark, s)
    time.sleep(6)  # silver stopped for longer than the timeout while the sensors sent on
    write_bronze(spark, bronze, records[third:], 4, random.Random(3), sent_at_event_time)

    stats = reconstruct.run(spark, s)  # the backlog in small batches, one commit each

    assert stats.batches >= 4
    found = silver_tables(spark, s)
    assert_matches(
        found,
        reference.reconstruct([(t, p, o, v) for t, p, o, _, v in records], s.kafka.topic_prefix),
    )
    assert not found.violations
    assert {r.status for r in table(spark, s, "silver.sessions")} == {"closed"}
    before = sorted(_without_batch_ids(table(spark, s, "silver.sessions")))

    reconstruct.run(spark, s, StreamRun(full_refresh=True))  # the same bronze in one batch

    assert_matches(silver_tables(spark, s), found)
    assert sorted(_without_batch_ids(table(spark, s, "silver.sessions"))) == before


def _without_batch_ids(rows: list) -> list[tuple]:  # type: ignore[type-arg]
    return [tuple(v for k, v in r.asDict().items() if not k.endswith("batch_id")) for r in rows]


def test_a_quiet_session_expires_by_the_data_clock_while_others_send(
    spark: SparkSession, tmp_path: Path
) -> None:
    s = on_a_short_clock(tmp_path, 10)
    sent = {}

    def at(topic: str, partition: int, offset: int, value: bytes, second: float) -> tuple:  # type: ignore[type-arg]
        sent[value] = T0 + timedelta(seconds=second)
        return (topic, partition, offset, None, value)

    topic, bronze = "sensors.a", s.storage.table_uri("bronze.sensor_records")
    quiet = [at(topic, 0, i, message("quiet", "a", i, i, "snapshot" if i == 0 else "update"), i)
             for i in range(3)]  # fmt: skip
    busy = [at(topic, 1, i, message("busy", "a", i, i, "snapshot" if i == 0 else "update"), i)
            for i in range(21)]  # fmt: skip
    write_bronze(spark, bronze, quiet + busy, 1, random.Random(4), sent.__getitem__)

    reconstruct.run(spark, s)  # busy's traffic moves the watermark to 18 s: quiet ends at 12 s

    status = {r.session_id: r.status for r in table(spark, s, "silver.sessions")}
    assert status == {"quiet": "expired", "busy": "open"}
    late = [at(topic, 0, 3, message("quiet", "a", 3, 19), 19),
            *(at(topic, 1, i, message("busy", "a", i, i), i) for i in range(21, 46))]  # fmt: skip
    write_bronze(spark, bronze, late, 1, random.Random(5), sent.__getitem__)

    reconstruct.run(spark, s)

    (rejected,) = table(spark, s, "silver.violations")
    assert (rejected.session_id, rejected.reason, rejected.offset) == ("quiet", "after_end", 3)
    assert rejected.detail == "session already expired"
    # By 45 s the watermark (43 s) has passed the tombstone's end too (19 s + 2 x 10 s).
    live = {r.session_id for r in reconstruct.live_state(spark, s).collect()}
    assert live == {"busy"}


FLOOD = 20_000
"""Sessions that open without a snapshot, against a bound of 50."""


def test_a_flood_of_sessions_without_a_snapshot_is_held_within_its_bound(
    spark: SparkSession, tmp_path: Path
) -> None:
    s = settings_for(
        tmp_path,
        "127.0.0.1:9",
        "sensors.",
        silver__bounds__sessions_without_snapshot="50",
        quality__validate_streams="false",
    )
    clean = kafka_records(small_spec(33, {}, sensors=1, sessions_per_sensor=2))
    topic = clean[0][0]
    # Twice Spark's Arrow batch of 10,000 rows: the sensor's rows reach it in chunks.
    flood = [
        (topic, 2, i, None, message(f"flood-{i:06d}", "sensor-001", 0, i / 1000))
        for i in range(FLOOD)
    ]
    bronze = s.storage.table_uri("bronze.sensor_records")
    write_bronze(spark, bronze, [*flood, *clean], 1, random.Random(6), lambda _: T0)

    reconstruct.run(spark, s)

    reasons = Counter(r.reason for r in table(spark, s, "silver.violations"))
    assert reasons == {"no_snapshot_bound": FLOOD - 50, "update_before_snapshot": 50}
    detail = (
        spark.read.format("delta").load(s.storage.table_uri("silver.violations"))
        .where(F.col("reason") == "no_snapshot_bound").first().detail
    )  # fmt: skip
    assert "silver.bounds.sessions_without_snapshot (50)" in detail
    held = reconstruct.live_state(spark, s)
    assert held.where(~F.col("has_snapshot")).count() == 50
    assert held.count() == 50 + 2
    clean_sessions = {(r[0], reference.session_of(r[4])) for r in clean}
    expected = reference.reconstruct(
        [(t, p, o, v) for t, p, o, _, v in clean], s.kafka.topic_prefix
    )
    assert_matches(only(silver_tables(spark, s), clean_sessions), expected)


def test_a_rebuild_replaces_silver_and_gold_follows_in_full(
    spark: SparkSession, tmp_path: Path
) -> None:
    # Incremental wherever gold can be: only the rebuild makes its next run a full one.
    s = settings_for(tmp_path, "127.0.0.1:9", "sensors.", gold__full_refresh_below_mb="0")
    records = kafka_records(small_spec(34, {"gap": 2, "duplicate": 2, "malformed_json": 1}))
    write_bronze(spark, s.storage.table_uri("bronze.sensor_records"), records, 3, random.Random(7))
    reconstruct.run(spark, s)
    run_models(spark, s.storage, MODELS)
    expected = reference.reconstruct(
        [(t, p, o, v) for t, p, o, _, v in records], s.kafka.topic_prefix
    )
    counts = {name: len(table(spark, s, name)) for name in reconstruct.WRITES if "silver." in name}

    reconstruct.run(spark, s, StreamRun(full_refresh=True))
    run_models(spark, s.storage, MODELS)

    assert_matches(silver_tables(spark, s), expected)
    for name, count in counts.items():
        assert len(table(spark, s, name)) == count, name
    assert_gold_equals_pandas_from_silver(spark, s)
    runs = spark.read.format("delta").load(s.storage.table_uri("gold.model_runs"))
    last = runs.orderBy(F.desc("started_at")).first()
    assert last is not None and last.mode == "full"
    # A checkpoint lost (or moved aside) rebuilds the same way.
    shutil.rmtree(s.storage.checkpoint_uri(reconstruct.CHECKPOINT).removeprefix("file://"))
    reconstruct.run(spark, s)
    assert_matches(silver_tables(spark, s), expected)
    for name, count in counts.items():
        assert len(table(spark, s, name)) == count, name


def test_a_session_id_used_again_after_its_tombstone_starts_from_its_own_snapshot(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Session `again` sets rows r0, r1, r2 and ends; once its tombstone is forgotten (two
    timeouts of other traffic later), the sensor opens a session of the same id whose
    snapshot names r0 only: `silver.session_rows` holds r0 alone, written by the new
    session, whether the two come in two runs (a MERGE) or in one rebuild."""
    s = on_a_short_clock(tmp_path, 5)
    sent = {}

    def at(partition: int, offset: int, value: bytes, second: float) -> tuple:  # type: ignore[type-arg]
        sent[value] = T0 + timedelta(seconds=second)
        return ("sensors.a", partition, offset, None, value)

    bronze = s.storage.table_uri("bronze.sensor_records")
    old = [at(0, i, message("again", "a", i, i, kind), i)
           for i, kind in enumerate(("snapshot", "update", "update", "end"))]  # fmt: skip
    busy = [at(1, i, message("busy", "a", i, i, "snapshot" if i == 0 else "update"), i)
            for i in range(20)]  # fmt: skip
    write_bronze(spark, bronze, old + busy, 1, random.Random(6), sent.__getitem__)
    reconstruct.run(spark, s)  # by 19 s the tombstone (ended at 3 s, kept 5 s) is gone
    assert {r.session_id for r in reconstruct.live_state(spark, s).collect()} == {"busy"}
    new = [at(0, 4, message("again", "a", 0, 21, "snapshot"), 21),
           at(1, 20, message("busy", "a", 20, 21), 21)]  # fmt: skip
    write_bronze(spark, bronze, new, 1, random.Random(7), sent.__getitem__)

    reconstruct.run(spark, s)

    rows = {(r.row_id, r.offset) for r in table(spark, s, "silver.session_rows")
            if r.session_id == "again"}  # fmt: skip
    assert rows == {("r0", 4)}
    reconstruct.run(spark, s, StreamRun(full_refresh=True))  # both sessions in one batch
    rebuilt = {(r.row_id, r.offset) for r in table(spark, s, "silver.session_rows")
               if r.session_id == "again"}  # fmt: skip
    assert rebuilt == rows


def test_records_waiting_in_window_mode_are_violations_when_their_session_ends_or_expires(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Silver in window mode: session `w` waits for seq 1 with seq 2 and 3 until it
    expires (5 s of quiet, while `busy` sends on); session `e` waits for seq 2 with seq 3
    when it ends at seq 1. Every record not applied is a violation, with its offset."""
    rule = '[{topics: ".*", mode: window, policy: quarantine, window: 10}]'
    keys = {"silver__session_timeout_seconds": "5", "silver__allowed_lateness_seconds": "2"}
    s = settings_for(tmp_path, "127.0.0.1:9", "sensors.", silver__integrity=rule, **keys)
    sent = {}

    def at(partition: int, offset: int, value: bytes, second: float) -> tuple:  # type: ignore[type-arg]
        sent[value] = T0 + timedelta(seconds=second)
        return ("sensors.a", partition, offset, None, value)

    waits = [
        at(0, 0, message("w", "a", 0, 0, "snapshot"), 0),
        at(0, 1, message("w", "a", 2, 1), 1),
        at(0, 2, message("w", "a", 3, 2), 2),
    ]
    ends = [
        at(2, 0, message("e", "a", 0, 0, "snapshot"), 0),
        at(2, 1, message("e", "a", 3, 1), 1),
        at(2, 2, message("e", "a", 1, 2, "end"), 2),
    ]
    busy = [at(1, i, message("busy", "a", i, i, "snapshot" if i == 0 else "update"), i)
            for i in range(20)]  # fmt: skip
    bronze = s.storage.table_uri("bronze.sensor_records")
    write_bronze(spark, bronze, waits + ends + busy, 1, random.Random(8), sent.__getitem__)

    reconstruct.run(spark, s)

    found = sorted((v.session_id, v.offset, v.reason, v.detail)
                   for v in table(spark, s, "silver.violations"))  # fmt: skip
    assert found == [
        ("e", 1, "after_end", "waiting for seq 2 when the session ended at seq 1"),
        ("w", 1, "gap", "waiting for seq 1 when the session expired"),
        ("w", 2, "gap", "waiting for seq 1 when the session expired"),
    ]
    status = {r.session_id: r.status for r in table(spark, s, "silver.sessions")}
    assert status == {"w": "expired", "e": "closed", "busy": "open"}


def test_a_producer_clock_ahead_ends_no_other_sensors_session(
    spark: SparkSession, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Through the broker: sensor `ahead`'s producer stamps its records 50 minutes ahead (the
    broker accepts up to an hour) and sends a whole session while `b`'s (20 s timeout) is
    open; `b` sends the rest of it after silver ran. `ahead`'s time counts no later than
    bronze ingested it, so `b`'s session is not expired by another sensor's clock: every
    record is applied, both sessions close, and bronze's suite names the lead. (Both jobs
    run in this process: the claim is about the clock, not the command.)"""
    prefix = "clock-ahead."
    keys = {"silver__session_timeout_seconds": "20"}
    s = settings_for(tmp_path, kafka_bootstrap, prefix, **keys)
    create_topics(kafka_bootstrap, [f"{prefix}ahead", f"{prefix}b"], 1, {})
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    now = time.time()

    def send(session: str, sensor: str, seq: int, kind: str, at: float) -> None:
        value = message(session, sensor, seq, seq, kind)
        producer.produce(f"{prefix}{sensor}", value, session.encode(), 0, timestamp=int(at * 1000))

    def run_both() -> None:
        assert producer.flush(30) == 0
        sensor_records.run(spark, s)
        reconstruct.run(spark, s)

    send("b1", "b", 0, "snapshot", now)
    send("b1", "b", 1, "update", now + 1)
    for seq, kind in enumerate(("snapshot", "update", "update", "end")):
        send("a1", "ahead", seq, kind, now + 50 * 60 + seq)
    run_both()
    send("b1", "b", 2, "update", now + 5)  # sent late, stamped in the session's time
    send("b1", "b", 3, "end", now + 6)

    run_both()

    assert table(spark, s, "silver.violations") == []
    status = {(r.sensor_id, r.session_id): r.status for r in table(spark, s, "silver.sessions")}
    assert status == {("b", "b1"): "closed", ("ahead", "a1"): "closed"}
    results = store.read_results(spark, s.storage)
    assert results is not None
    warned = results.where("expectation = 'timestamps_sane' AND NOT success").collect()
    assert [(r.severity, r.unexpected_count) for r in warned] == [("warn", 4)]
