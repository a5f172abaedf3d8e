"""The reconciler counts what a layer lost, doubled or altered against what it must hold,
and forgives only the offsets an operator accepted as lost."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from lakehouse.gameday import reconcile, reference
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


def test_silver_equal_to_the_reference_passes_and_a_copied_row_change_is_doubled() -> None:
    spec = TrafficSpec(sensors=1, sessions_per_sensor=2, rows_per_snapshot=3,
                       updates_per_session=6, faults={"gap": 1})  # fmt: skip
    records = [(r.topic, r.partition, o, r.value) for o, r in enumerate(generate_traffic(spec))]
    expected = reference.reconstruct(records)
    same = reference.reconstruct(list(reversed(records)))
    assert reconcile.silver_vs_reference(same, expected).ok
    same.changes.update(Counter([next(iter(same.changes))]))
    row = next(iter(same.rows))
    del same.rows[row]
    found = reconcile.silver_vs_reference(same, expected)
    assert (found.lost, found.doubled, found.altered) == (1, 1, 0)
    assert found.examples[0].startswith("lost session_rows")


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
