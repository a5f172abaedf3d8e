from __future__ import annotations

import itertools
import json
from collections import Counter, defaultdict
from dataclasses import replace

import pytest

from lakehouse.core.errors import LakehouseError
from lakehouse.ops.producer import MAX_VALUE_BYTES, Record, TrafficSpec, generate_traffic

SMALL = TrafficSpec(
    seed=3, sensors=3, sessions_per_sensor=3, rows_per_snapshot=20, updates_per_session=40
)


def parsed(records: list[Record]) -> list[dict]:
    return [json.loads(r.value) for r in records]


def test_same_seed_gives_the_same_records_and_another_seed_does_not() -> None:
    assert list(generate_traffic(SMALL)) == list(generate_traffic(SMALL))
    other = replace(SMALL, seed=4)
    assert list(generate_traffic(other)) != list(generate_traffic(SMALL))


def test_clean_sessions_open_with_a_snapshot_count_seq_from_zero_and_end() -> None:
    by_session: dict[str, list[dict]] = defaultdict(list)
    for message in parsed(list(generate_traffic(SMALL))):
        by_session[message["session_id"]].append(message)
    assert len(by_session) == 9
    for messages in by_session.values():
        assert [m["seq"] for m in messages] == list(range(42))
        assert messages[0]["kind"] == "snapshot" and len(messages[0]["rows"]) == 20
        assert {m["kind"] for m in messages[1:-1]} == {"update"}
        assert messages[-1]["kind"] == "end"


def test_updates_carry_one_row_upsert_or_delete_of_a_known_row() -> None:
    tables: dict[str, set[str]] = {}
    for m in parsed(list(generate_traffic(SMALL))):
        if m["kind"] == "snapshot":
            tables[m["session_id"]] = {row["row_id"] for row in m["rows"]}
        elif m["kind"] == "update" and m["op"] == "delete":
            assert m["row_id"] in tables[m["session_id"]]
            tables[m["session_id"]].remove(m["row_id"])
        elif m["kind"] == "update":
            assert m["op"] == "upsert"
            assert set(m["row"]["values"]) == {
                "temperature",
                "humidity",
                "pressure",
                "status",
                "counter",
            }
            tables[m["session_id"]].add(m["row"]["row_id"])


def test_sessions_of_a_sensor_overlap_in_time() -> None:
    order = [
        json.loads(r.value)["session_id"]
        for r in generate_traffic(SMALL)
        if r.topic == "sensors.sensor-001"
    ]
    first_end = max(i for i, s in enumerate(order) if s == order[0])
    assert len(set(order[:first_end])) > 1


def test_a_session_stays_in_one_partition_of_its_sensors_topic() -> None:
    places: dict[bytes | None, set[tuple[str, int]]] = defaultdict(set)
    for record in generate_traffic(SMALL):
        places[record.key].add((record.topic, record.partition))
    assert all(len(p) == 1 for p in places.values())
    assert {t for p in places.values() for t, _ in p} == {
        f"sensors.sensor-00{i}" for i in (1, 2, 3)
    }


def test_each_fault_kind_is_injected_exactly_as_often_as_asked() -> None:
    faults = {
        "gap": 2,
        "duplicate": 3,
        "reorder": 2,
        "malformed_json": 1,
        "missing_field": 2,
        "wrong_type": 1,
        "oversize": 1,
        "null_key": 2,
    }
    spec = replace(SMALL, sessions_per_sensor=5, faults=faults)
    records = list(generate_traffic(spec))
    found: Counter[str] = Counter()
    seqs: dict[str, list[int]] = defaultdict(list)
    for record in records:
        found["null_key"] += record.key is None
        found["oversize"] += len(record.value) > MAX_VALUE_BYTES
        try:
            message = json.loads(record.value)
        except json.JSONDecodeError:
            found["malformed_json"] += 1
            continue
        if "seq" not in message:
            found["missing_field"] += 1
        elif isinstance(message["seq"], str):
            found["wrong_type"] += 1
        else:
            seqs[message["session_id"]].append(message["seq"])
    for session in seqs.values():
        found["duplicate"] += len(session) - len(set(session))
        found["reorder"] += sum(1 for a, b in itertools.pairwise(session) if b < a)
    expected_total = 15 * 42 - faults["gap"] + faults["duplicate"]
    assert len(records) == expected_total
    assert found == Counter({k: v for k, v in faults.items() if k != "gap"})
    # every seq never seen is a gap or a record whose seq could not be read
    unreadable = faults["malformed_json"] + faults["missing_field"] + faults["wrong_type"]
    assert sum(42 - len(set(s)) for s in seqs.values()) == faults["gap"] + unreadable


def test_unknown_fault_kind_is_refused() -> None:
    with pytest.raises(LakehouseError, match="unknown fault"):
        TrafficSpec(faults={"bitflip": 1})


def test_more_faults_than_sessions_is_refused() -> None:
    with pytest.raises(LakehouseError, match="a session of its own"):
        list(
            generate_traffic(
                TrafficSpec(
                    sensors=1, sessions_per_sensor=1, updates_per_session=4, faults={"gap": 50}
                )
            )
        )
