"""Hostile records through a real broker, bronze, silver and gold: none can stop the pipeline.

Each hostile record sits alone in its own session, between a good snapshot and a good
update, and the sessions are interleaved with clean traffic on the same partitions. Silver
must finish, reject each hostile record at its exact lineage (or apply it, where the
protocol allows it), keep the clean sessions exact, and gold must compute over all of it.
"""

from __future__ import annotations

from itertools import zip_longest
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession

from bronze import sensor_records
from gold import sensor_hourly
from lakehouse.definitions import MODELS
from lakehouse.gameday import reference
from lakehouse.ops.producer import TrafficSpec, create_topics, generate_traffic
from lakehouse.runtime.incremental import run_models
from silver import reconstruct, row_changes, sessions, violations
from tests.support import settings_for
from tests.support.gold import assert_gold_equals_pandas_from_silver, table
from tests.support.hostile import CASES, OWN, PREFIX, START, TOPIC, hostile_messages, session_of
from tests.support.silver import assert_matches, only, silver_tables

pytestmark = pytest.mark.integration


def produce_corpus(bootstrap: str) -> tuple[dict[str, list[tuple]], list[tuple]]:
    """Hostile sessions and clean traffic interleaved on the same topic's partitions.

    Returns each hostile session's records and the clean ones, as
    (topic, partition, offset, key, value), offsets as the broker gave them.
    """
    clean = [
        (r.topic, r.partition, r.key, r.value)
        for r in generate_traffic(
            TrafficSpec(
                seed=11,
                sensors=2,
                sessions_per_sensor=3,
                rows_per_snapshot=5,
                updates_per_session=20,
                resync_every=8,
                start_time=START,
                partitions=2,
                topic_prefix=PREFIX,
            )
        )
    ]
    hostile = [
        (TOPIC, index % 2, key, value, session_of(index))
        for index, case in enumerate(CASES)
        for key, value in hostile_messages(index, case)
    ]
    create_topics(bootstrap, sorted({t for t, *_ in clean}), 2, {})
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 2_000_000})
    by_session: dict[str, list[tuple]] = {}
    clean_sent: list[tuple] = []

    def send(topic: str, partition: int, key: bytes | None, value: bytes, into: list) -> None:  # type: ignore[type-arg]
        def delivered(error: Any, message: Any) -> None:
            assert error is None, error
            into.append((topic, partition, message.offset(), key, value))

        producer.produce(topic, value, key, partition, on_delivery=delivered)

    for h, c in zip_longest(hostile, clean):
        if h is not None:
            send(*h[:4], by_session.setdefault(h[4], []))
        if c is not None:
            send(*c, clean_sent)
        producer.poll(0)
    assert producer.flush(60) == 0
    return by_session, clean_sent


def test_no_hostile_record_stops_silver_or_gold(
    spark: SparkSession, kafka_bootstrap: str, tmp_path: Path
) -> None:
    by_session, clean = produce_corpus(kafka_bootstrap)
    # Without validation, values the suites would quarantine (1.7e308 °C) reach gold too.
    s = settings_for(tmp_path, kafka_bootstrap, PREFIX, quality__validate_streams="false")
    sensor_records.run(spark, s)

    reconstruct.run(spark, s)

    found_violations = {
        (r.topic, r.partition, r.offset): r for r in table(spark, s, violations.NAME).collect()
    }
    changed = {
        (r.topic, r.partition, r.offset) for r in table(spark, s, row_changes.NAME).collect()
    }
    status = {r.session_id: r.status for r in table(spark, s, sessions.NAME).collect()}
    expected_lineages = set()
    for index, case in enumerate(CASES):
        session = session_of(index)
        snapshot, hostile, update = (record[:3] for record in by_session[session])
        assert snapshot in changed and snapshot not in found_violations, case.name
        if case.reason is None:
            assert hostile in changed and update in changed, case.name
            assert status[session] == "open", case.name
            continue
        violation = found_violations.get(hostile)
        assert violation is not None, f"{case.name}: no violation at {hostile}"
        owner = session if case.session == OWN else case.session
        assert (violation.reason, violation.session_id) == (case.reason, owner), case.name
        assert case.detail in violation.detail, (case.name, violation.detail)
        assert bytes(violation.raw_value) == by_session[session][1][4], case.name
        # The session follows its policy: strict + quarantine breaks it at the hostile
        # record (or, if that went to no session, at the gap it leaves).
        after = found_violations.get(update)
        assert after is not None and after.reason == (
            "quarantined" if owner == session else "gap"
        ), case.name
        assert status[session] == "broken", case.name
        expected_lineages |= {hostile, update}
    clean_lineages = {r[:3] for r in clean}
    assert set(found_violations) - clean_lineages == expected_lineages
    assert not set(found_violations) & clean_lineages

    clean_sessions = {(r[0], reference.session_of(r[4])) for r in clean}
    expected = reference.reconstruct(
        [(t, p, o, v) for t, p, o, _, v in clean], s.kafka.topic_prefix
    )
    assert_matches(only(silver_tables(spark, s), clean_sessions), expected)

    run_models(spark, s.storage, MODELS)

    assert_gold_equals_pandas_from_silver(spark, s)
    hours = {r.hour.year for r in table(spark, s, sensor_hourly.NAME).collect()}
    assert {1970, 2026, 2099} <= hours
