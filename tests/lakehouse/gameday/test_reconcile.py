"""The reconciler counts what a layer lost, doubled or altered against what it must hold,
and forgives only the offsets an operator accepted as lost."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakehouse.gameday import gold_reference, reconcile, reference
from lakehouse.gameday.reconcile import Tally
from lakehouse.ops.producer import TrafficSpec, generate_traffic

SENT = [("s.a", 0, o, b"k", b"v%d" % o, ()) for o in range(6)]


def test_bronze_equal_to_kafka_passes() -> None:
    assert reconcile.kafka_vs_bronze(SENT, list(reversed(SENT))) == Tally("kafka ↔ bronze")


@settings(max_examples=40)
@given(st.sets(st.integers(0, 5)), st.sets(st.integers(0, 5)), st.sets(st.integers(0, 5)))
def test_each_record_lost_doubled_or_altered_is_counted_once(
    lost: set[int], doubled: set[int], altered: set[int]
) -> None:
    held = [r for r in SENT if r[2] not in lost]
    held += [r for r in SENT if r[2] in doubled - lost]
    held = [(*r[:4], b"x", r[5]) if r[2] in altered - lost else r for r in held]
    found = reconcile.kafka_vs_bronze(SENT, held)
    assert (found.lost, found.doubled) == (len(lost), len(doubled - lost))
    assert found.altered == len(altered - lost)
    assert found.ok == (not lost and not doubled and not altered)


def test_only_an_accepted_range_of_its_own_partition_is_forgiven() -> None:
    held = [r for r in SENT if r[2] not in (1, 2, 4)]
    found = reconcile.kafka_vs_bronze(SENT, held, [("s.a", 0, 1, 3), ("s.a", 1, 4, 5)])
    assert (found.lost, found.accepted) == (1, 2)
    assert found.examples == ("lost ('s.a', 0, 4)",)
    assert "2 lost in Kafka and accepted" in found.line()


def test_a_record_bronze_holds_that_was_never_sent_is_altered() -> None:
    found = reconcile.kafka_vs_bronze(SENT[:1], SENT[:2])
    assert (found.lost, found.doubled, found.altered) == (0, 0, 1)


SPEC = TrafficSpec(sensors=2, sessions_per_sensor=2, rows_per_snapshot=3, updates_per_session=6,
                   faults={"gap": 1, "malformed_json": 1}, partitions=2)  # fmt: skip
RECORDS = [(r.topic, r.partition, o, r.value) for o, r in enumerate(generate_traffic(SPEC))]


def test_silver_equal_to_the_reference_passes_and_a_copied_row_change_is_doubled() -> None:
    expected = reference.reconstruct(RECORDS, SPEC.topic_prefix)
    same = reference.reconstruct(list(reversed(RECORDS)), SPEC.topic_prefix)
    assert reconcile.silver_vs_reference(same, expected).ok
    same.changes.append(same.changes[0])
    del same.rows[0]
    found = reconcile.silver_vs_reference(same, expected)
    assert (found.lost, found.doubled, found.altered) == (1, 1, 0)
    assert found.examples[0].startswith("lost session_rows")


def test_a_row_held_twice_with_its_own_values_is_one_doubled_row() -> None:
    expected = reference.reconstruct(RECORDS, SPEC.topic_prefix)
    found = reference.reconstruct(RECORDS, SPEC.topic_prefix)
    found.rows.append(found.rows[1])
    found.sessions.append(found.sessions[0])
    tally = reconcile.silver_vs_reference(found, expected)
    assert (tally.lost, tally.doubled, tally.altered) == (0, 2, 0)
    assert tally.examples[0] == f"doubled session_rows {found.rows[1][0]}"


@pytest.mark.parametrize("column", [0, 5, 6, 8])  # temperature, sensor, event time, partition
def test_a_row_change_with_one_value_changed_is_altered(column: int) -> None:
    expected = reference.reconstruct(RECORDS, SPEC.topic_prefix)
    found = reference.reconstruct(RECORDS, SPEC.topic_prefix)
    key, values = found.changes[3]
    changed = values[column] + 1 if isinstance(values[column], int | float) else "sensor-x"
    found.changes[3] = (key, (*values[:column], changed, *values[column + 1 :]))
    tally = reconcile.silver_vs_reference(found, expected)
    assert (tally.lost, tally.doubled, tally.altered) == (0, 0, 1)
    assert tally.examples == (f"altered row_changes {key}",)


def test_a_violation_lost_in_one_partition_and_doubled_in_another_does_not_net_to_zero() -> None:
    expected = reference.reconstruct(RECORDS, SPEC.topic_prefix)
    found = reference.reconstruct(RECORDS, SPEC.topic_prefix)
    (session, reason, topic, partition, offset), value = found.violations[0]
    found.violations[0] = ((session, reason, topic, 1 - partition, offset), value)
    tally = reconcile.silver_vs_reference(found, expected)
    assert (tally.lost, tally.altered) == (1, 1)


def test_gold_reference_is_computed_from_what_was_sent_not_copied_from_silver() -> None:
    expected = reference.reconstruct(RECORDS, SPEC.topic_prefix)
    _, sessions, violations = gold_reference.silver_frames(expected)
    summary = gold_reference.summary_reference(sessions, violations)
    sent = [json.loads(v) for *_, v in RECORDS if v.startswith(b"{") and v.endswith(b"}")]
    for (sensor, session), row in summary.items():
        mine = [m for m in sent if (m["sensor_id"], m["session_id"]) == (sensor, session)]
        times = [datetime.fromisoformat(m["event_time"]).replace(tzinfo=None) for m in mine]
        assert (row["started_at"], row["ended_at"]) == (min(times), max(times))
        assert row["records"] == len(mine)  # the record cut in half names no session
    named = [session for (session, *_), _ in expected.violations if session is not None]
    assert sum(r["violations"] for r in summary.values()) == len(named) > 2  # a gap quarantines


def test_gold_rows_by_key_lost_doubled_and_altered() -> None:
    expected = {("a", 1): {"n": 1.0}, ("b", 2): {"n": 2.0}, ("c", 3): {"n": float("nan")}}
    rows = [{"k": "a", "h": 1, "n": 1.0 + 1e-12}, {"k": "a", "h": 1, "n": 1.0},
            {"k": "c", "h": 3, "n": None}, {"k": "d", "h": 4, "n": 0.0}]  # fmt: skip
    found = reconcile.rows_vs_reference("gold.t", rows, ("k", "h"), expected)
    assert (found.lost, found.doubled, found.altered) == (1, 2, 0)
    rows[2]["n"] = 0.0
    assert reconcile.rows_vs_reference("gold.t", rows, ("k", "h"), expected).altered == 1


def test_silver_is_owed_only_the_records_bronze_passes_on() -> None:
    assert reference.reaches_silver(b"s-1", b"{}")
    assert not reference.reaches_silver(None, b"{}")  # quarantined by bronze: key_present
    assert not reference.reaches_silver(b"s-1", None)
    assert reference.reaches_silver(b"s-1", b"x" * 262_144)
    assert not reference.reaches_silver(b"s-1", b"x" * 262_145)
