"""Hostile records through a real broker, bronze, silver and gold: none can stop the pipeline.

Each hostile record sits alone in its own session, between a good snapshot and a good
update, and the sessions are interleaved with clean traffic on the same partitions. Silver
must finish, reject each hostile record at its exact lineage (or apply it, where the
protocol allows it), keep the clean sessions exact, and gold must compute over all of it.
"""

# ruff: noqa: E501  (the corpus is a table: one case per line reads better than wrapped ones)
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import zip_longest
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession

from bronze import sensor_records
from gold import sensor_hourly
from lakehouse.incremental import run_models
from lakehouse.pipeline import MODELS
from lakehouse.producer import TrafficSpec, create_topics, generate_traffic
from silver import reconstruct, row_changes, sessions, violations
from tests.integration.test_gold import assert_gold_equals_pandas_from_silver, table
from tests.integration.test_silver import assert_matches, silver_tables
from tests.silver import reference
from tests.support import settings_for

pytestmark = pytest.mark.integration

PREFIX = "hostile.sensors."
SENSOR = "sensor-001"
TOPIC = PREFIX + SENSOR
START = datetime(2026, 3, 1, tzinfo=UTC)
VALUES = {"temperature": 20.5, "humidity": 40.0, "pressure": 1000.0, "status": "ok", "counter": 1}
OWN = "own"
"""The violation belongs to the hostile record's own session."""


@dataclass(frozen=True)
class Case:
    """One hostile record: how to make it from its session's good update, and what silver
    must make of it. `reason` None means the protocol allows it: an applied change."""

    name: str
    make: Callable[[dict[str, Any]], dict[str, Any] | bytes]
    reason: str | None
    detail: str = ""
    session: str | None = OWN
    """Where the violation lands: OWN, None (no usable session id) or another session."""
    key: bytes | None = None
    """The Kafka key, when it is not the session id."""


def values(**changed: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def make(m: dict[str, Any]) -> dict[str, Any]:
        return {**m, "row": {"row_id": "r0", "values": {**VALUES, **changed}}}

    return make


def fields(**changed: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda m: {**m, **changed}


def text(change: Callable[[str], str]) -> Callable[[dict[str, Any]], bytes]:
    return lambda m: change(json.dumps(m)).encode()


DEEP = "[" * 20_000 + "]" * 20_000
CASES = [
    # What stopped silver before the protocol was typed.
    Case("temperature as text", values(temperature="hot"), "invalid", 'temperature: expected a number, got string "hot"'),
    Case("temperature as a list", values(temperature=[21.0]), "invalid", "temperature: expected a number, got array"),
    Case("temperature as an object", values(temperature={"c": 21}), "invalid", "got object"),
    Case("status as a number", values(status=7), "invalid", "status: expected a string, got integer 7"),
    Case("counter of 10^30", values(counter=10**30), "invalid", "counter: integer"),
    Case("seq of 2^63", fields(seq=2**63), "invalid", "seq: integer 9223372036854775808 outside"),
    Case("seq of 10^40", fields(seq=10**40), "invalid", "seq: integer"),
    Case("counter of 2.5", values(counter=2.5), "invalid", "counter: expected an integer, got number 2.5"),
    Case("event_time yesterday", fields(event_time="yesterday"), "invalid", 'event_time: expected an ISO 8601'),
    Case("temperature true", values(temperature=True), "invalid", "temperature: expected a number, got boolean"),
    # Handled before; kept so.
    Case("byte order mark", lambda m: b"\xef\xbb\xbf" + json.dumps(m).encode(), "unparsable", "byte order mark", session=None),
    Case("a JSON array", lambda m: json.dumps([m]).encode(), "unparsable", "not a JSON object: array", session=None),
    Case("20,000-deep nesting", text(lambda t: t[:-1] + f', "extra": {DEEP}}}'), "unparsable", "nested too deep", session=None),
    Case("null values", lambda m: {**m, "row": {"row_id": "r0", "values": None}}, "invalid", "row.values: expected an object, got null"),
    Case("rows not a list", fields(kind="snapshot", rows="r0"), "invalid", "rows: expected an array, got string"),
    Case("unknown kind", fields(kind="reset"), "unknown_kind", 'kind: "reset" is none of'),
    Case("NaN seq", text(lambda t: t.replace('"seq": 1,', '"seq": NaN,')), "unparsable", "NaN is not a JSON number", session=None),
    Case("numeric row id", lambda m: {**m, "row": {"row_id": 5, "values": VALUES}}, "invalid", "row.row_id: expected a string, got integer 5"),
    # Each wrong type per envelope field.
    Case("session_id a number", fields(session_id=19019), "invalid", "session_id: expected a string, got integer", session="19019"),
    Case("sensor_id a number", fields(sensor_id=1), "invalid", "sensor_id: expected a string, got integer"),
    Case("kind a number", fields(kind=2), "unknown_kind", "kind: 2 is none of"),
    Case("op a boolean", fields(op=True), "invalid", "op: expected a string, got boolean"),
    Case("event_time a number", fields(event_time=1_772_323_200), "invalid", "event_time: expected an ISO 8601 timestamp string, got integer"),
    Case("humidity as text", values(humidity="40"), "invalid", "humidity: expected a number, got string"),
    Case("pressure a boolean", values(pressure=False), "invalid", "pressure: expected a number, got boolean"),
    # Integer edges.
    Case("counter 2^31", values(counter=2**31), None),
    Case("counter -2^31 - 1", values(counter=-(2**31) - 1), None),
    Case("counter 2^63 - 1", values(counter=2**63 - 1), None),
    Case("counter -2^63", values(counter=-(2**63)), None),
    Case("counter 2^63", values(counter=2**63), "invalid", "counter: integer 9223372036854775808 outside"),
    Case("seq 2^31", fields(seq=2**31), "gap", "expected seq 1, found 2147483648"),
    Case("seq 2^63 - 2", fields(seq=2**63 - 2), "gap", "found 9223372036854775806"),
    # Empty, long and control-character strings.
    Case("empty session_id", fields(session_id=""), "invalid", "session_id: empty string", session=None),
    Case("empty row id", lambda m: {**m, "row": {"row_id": "", "values": VALUES}}, "invalid", "row.row_id: empty string"),
    Case("empty status", values(status=""), "invalid", "status: empty string"),
    Case("empty event_time", fields(event_time=""), "invalid", "event_time: expected an ISO 8601"),
    Case("10,000-character session_id", fields(session_id="s" * 10_000), "invalid", "session_id: string of 10,000 characters", session=None),
    Case("100,000-character row id", lambda m: {**m, "row": {"row_id": "r" * 100_000, "values": VALUES}}, "invalid", "row.row_id: string of 100,000 characters"),
    Case("1,000-character status", values(status="ok" * 500), "invalid", "status: string of 1,000 characters"),
    Case("NUL in a row id", lambda m: {**m, "row": {"row_id": "r\x000", "values": VALUES}}, "invalid", "row.row_id: control character"),
    Case("escape sequence in status", values(status="ok\x1b[2J"), "invalid", "status: control character"),
    Case("bell in session_id", fields(session_id="h-bell\x07"), "invalid", "session_id: control character", session=None),
    Case("not UTF-8", lambda m: json.dumps(m).encode().replace(b'"ok"', b'"\xff"'), "unparsable", "not UTF-8"),
    # Duplicate keys, and messages that disagree with their key and topic.
    Case("seq twice", text(lambda t: t.replace('"seq": 1,', '"seq": 1, "seq": 2,')), "invalid", '"seq": key repeated'),
    Case("session_id differs from the key", fields(), "invalid", "differs from the Kafka key 'someone-else'", key=b"someone-else"),
    Case("sensor_id differs from the topic", fields(sensor_id="sensor-002"), "invalid", "sensor_id: 'sensor-002' differs from the topic's sensor 'sensor-001'"),
    Case("a snapshot naming a row twice", fields(kind="snapshot", rows=[{"row_id": "r0", "values": VALUES}] * 2), "invalid", "appears twice"),
    # Allowed by the protocol: applied.
    Case("no values at all", values(temperature=None, humidity=None, pressure=None, status=None, counter=None), None),
    Case("unknown fields", lambda m: {**m, "firmware": "2.1", "row": {"row_id": "r0", "values": {**VALUES, "colour": "red"}}}, None),
    Case("integral temperature", values(temperature=21), None),
    Case("largest double", values(temperature=1.7e308, humidity=-1.7e308), None),
    Case("offset event_time", fields(event_time="2026-03-01T05:00:00.5+02:00"), None),
    Case("1970", fields(event_time="1970-01-01T00:00:00Z"), None),
    Case("2099", fields(event_time="2099-12-31T23:59:59.999999Z"), None),
]  # fmt: skip


def session_of(index: int) -> str:
    return f"h-{index:03d}"


def hostile_messages(index: int, case: Case) -> list[tuple[bytes | None, bytes]]:
    """(key, value) of the snapshot, the hostile record and the good update after it."""
    session = session_of(index)
    at = START + timedelta(hours=index)

    def message(seq: int, kind: str, **payload: Any) -> dict[str, Any]:
        time = (at + timedelta(seconds=seq)).isoformat().replace("+00:00", "Z")
        return {
            "session_id": session,
            "sensor_id": SENSOR,
            "seq": seq,
            "kind": kind,
            "event_time": time,
            **payload,
        }

    rows = [{"row_id": f"r{r}", "values": {**VALUES, "counter": r}} for r in range(2)]
    update = {"op": "upsert", "row": {"row_id": "r1", "values": {**VALUES, "temperature": 30.0}}}
    made = case.make(message(1, "update", op="upsert", row={"row_id": "r0", "values": VALUES}))
    hostile = made if isinstance(made, bytes) else json.dumps(made).encode()
    return [
        (session.encode(), json.dumps(message(0, "snapshot", rows=rows)).encode()),
        (case.key or session.encode(), hostile),
        (session.encode(), json.dumps(message(2, "update", **update)).encode()),
    ]


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
    expected = reference.reconstruct([(t, p, o, v) for t, p, o, _, v in clean])
    assert_matches(only(silver_tables(spark, s), clean_sessions), expected)

    run_models(spark, s.storage, MODELS)

    assert_gold_equals_pandas_from_silver(spark, s)
    hours = {r.hour.year for r in table(spark, s, sensor_hourly.NAME).collect()}
    assert {1970, 2026, 2099} <= hours


def only(found: reference.Expected, sessions: set[tuple[str, str | None]]) -> reference.Expected:
    """The part of silver's tables that belongs to the given sessions."""
    return reference.Expected(
        rows={k: v for k, v in found.rows.items() if k[0] in sessions},
        sessions={k: v for k, v in found.sessions.items() if k in sessions},
        violations=type(found.violations)(
            {k: v for k, v in found.violations.items() if k[0] in sessions}
        ),
        changes=type(found.changes)({k: v for k, v in found.changes.items() if k[0] in sessions}),
    )
