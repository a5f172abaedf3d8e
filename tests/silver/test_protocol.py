"""Parsing against the typed protocol: every field, every kind of wrong value."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from lakehouse import PROJECT_ROOT
from silver import protocol
from silver.session_state import Lineage, Reason, Record, parse_record

VALUES = {"temperature": 21.5, "humidity": 40, "pressure": 1000.0, "status": "ok", "counter": 7}
GOOD = {
    "snapshot": {"session_id": "s1", "sensor_id": "a", "seq": 0, "kind": "snapshot",
                 "event_time": "2026-01-01T00:00:00.000Z",
                 "rows": [{"row_id": "r1", "values": VALUES}]},
    "upsert": {"session_id": "s1", "sensor_id": "a", "seq": 1, "kind": "update",
               "event_time": "2026-01-01T00:00:01.250Z", "op": "upsert",
               "row": {"row_id": "r1", "values": VALUES}},
    "delete": {"session_id": "s1", "sensor_id": "a", "seq": 2, "kind": "update",
               "event_time": "2026-01-01T00:00:02Z", "op": "delete", "row_id": "r1"},
    "end": {"session_id": "s1", "sensor_id": "a", "seq": 3, "kind": "end",
            "event_time": "2026-01-01T00:00:03Z"},
}  # fmt: skip
LINEAGE = Lineage("sensors.a", 1, 42)


def parse(body: Any, key: bytes | None = b"s1", sensor: str | None = "a") -> Record:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return parse_record("s1", raw, LINEAGE, key, sensor)


def changed(kind: str, path: str, value: Any) -> dict[str, Any]:
    """GOOD[kind] with the field at `path` (dots and [i]) set to `value`, or removed if
    `value` is MISSING."""
    body = copy.deepcopy(GOOD[kind])
    *parents, last = re.findall(r"[^.\[\]]+", path)
    target: Any = body
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    slot = int(last) if isinstance(target, list) else last
    if value is MISSING:
        del target[slot]
    else:
        target[slot] = value
    return body


MISSING = object()
BIG = 2**63


def test_every_kind_of_good_message_parses_to_typed_values() -> None:
    snapshot, upsert, delete, end = (parse(GOOD[k]) for k in GOOD)
    assert snapshot.problem is None and snapshot.rows == {
        "r1": {
            "temperature": 21.5,
            "humidity": 40.0,
            "pressure": 1000.0,
            "status": "ok",
            "counter": 7,
        }
    }
    assert isinstance(snapshot.rows["r1"]["humidity"], float)
    assert snapshot.event_time == 1_767_225_600_000_000
    assert (upsert.op, upsert.row_id, upsert.event_time) == ("upsert", "r1", 1_767_225_601_250_000)
    assert (delete.op, delete.row_id, delete.values) == ("delete", "r1", None)
    assert (end.kind, end.seq, end.problem) == ("end", 3, None)


# (kind, field path, wrong value, words the detail must hold)
WRONG = [
    # each envelope field: missing, null, and each wrong JSON type
    *[("end", name, MISSING, [name, "missing"]) for name in
      ("session_id", "sensor_id", "seq", "event_time")],
    *[("end", name, None, [name, "null"]) for name in
      ("session_id", "sensor_id", "seq", "event_time")],
    *[("end", name, value, [name, "expected a string", type_name]) for name in
      ("session_id", "sensor_id") for value, type_name in
      ((5, "integer"), (1.5, "number"), (True, "boolean"), ([], "array"), ({}, "object"))],
    *[("end", "seq", value, ["seq", "expected an integer", type_name]) for value, type_name in
      (("3", "string"), (3.0, "number"), (2.5, "number"), (True, "boolean"), ([3], "array"),
       ({"n": 3}, "object"))],
    *[("end", "event_time", value, ["event_time", type_name]) for value, type_name in
      ((1_767_225_600, "integer"), (True, "boolean"), ([], "array"))],
    # integer edges: seq must leave room for the next seq in a BIGINT
    ("end", "seq", -1, ["seq", "outside [0, 9223372036854775806]"]),
    ("end", "seq", BIG - 1, ["seq", "outside"]),
    ("end", "seq", BIG, ["seq", "outside"]),
    ("end", "seq", 10**40, ["seq", "outside"]),
    # timestamps
    ("end", "event_time", "yesterday", ["event_time", "ISO 8601", '"yesterday"']),
    ("end", "event_time", "", ["event_time", "ISO 8601"]),
    ("end", "event_time", "2026-01-01", ["event_time", "ISO 8601"]),
    ("end", "event_time", "2026-01-01T00:00:00", ["event_time", "ISO 8601"]),
    ("end", "event_time", "2026-02-30T00:00:00Z", ["event_time", "no valid time"]),
    ("end", "event_time", "2026-01-01T25:00:00Z", ["event_time", "no valid time"]),
    ("end", "event_time", "1969-12-31T23:59:59Z", ["event_time", "outside 1970-2100"]),
    ("end", "event_time", "9999-12-31T23:59:59Z", ["event_time", "outside 1970-2100"]),
    # strings: empty, too long, control characters
    ("end", "session_id", "", ["session_id", "empty string"]),
    ("end", "sensor_id", "x" * 129, ["sensor_id", "129 characters, longer than 128"]),
    ("end", "sensor_id", "a\x00b", ["sensor_id", "control character"]),
    ("delete", "row_id", "r\n1", ["row_id", "control character"]),
    ("delete", "row_id", "", ["row_id", "empty string"]),
    ("delete", "row_id", "r" * 100_000, ["row_id", "100,000 characters"]),
    ("delete", "row_id", 7, ["row_id", "expected a string, got integer 7"]),
    ("snapshot", "rows[0].row_id", 7, ["rows[0].row_id", "expected a string, got integer"]),
    # kinds and ops
    ("end", "kind", MISSING, ["kind", "missing"]),
    ("upsert", "op", "merge", ["op", "expected one of upsert, delete"]),
    ("upsert", "op", MISSING, ["op", "missing"]),
    ("upsert", "op", 1, ["op", "expected a string, got integer"]),
    # payloads
    ("snapshot", "rows", "r1", ["rows", "expected an array, got string"]),
    ("snapshot", "rows", None, ["rows", "expected an array, got null"]),
    ("snapshot", "rows", MISSING, ["rows", "missing"]),
    ("snapshot", "rows[0]", "r1", ["rows[0]", "expected an object, got string"]),
    ("snapshot", "rows[0].values", None, ["rows[0].values", "expected an object, got null"]),
    ("snapshot", "rows[0].values", [1, 2], ["rows[0].values", "expected an object, got array"]),
    ("upsert", "row", MISSING, ["row", "missing"]),
    ("upsert", "row", [], ["row", "expected an object, got array"]),
    ("upsert", "row.values", MISSING, ["row.values", "missing"]),
    ("upsert", "row.row_id", MISSING, ["row.row_id", "missing"]),
    ("delete", "row_id", MISSING, ["row_id", "missing"]),
    # each value field, each wrong type
    *[("upsert", f"row.values.{name}", value, [f"row.values.{name}", "expected a number",
                                                   type_name])
      for name in ("temperature", "humidity", "pressure")
      for value, type_name in (("hot", "string"), (True, "boolean"), ([1.0], "array"),
                               ({"c": 1.0}, "object"))],
    *[("upsert", "row.values.status", value, ["row.values.status", "expected a string",
                                               type_name])
      for value, type_name in ((7, "integer"), (1.5, "number"), (False, "boolean"),
                               (["ok"], "array"))],
    ("upsert", "row.values.status", "", ["row.values.status", "empty string"]),
    ("upsert", "row.values.status", "o" * 33, ["row.values.status", "longer than 32"]),
    ("upsert", "row.values.status", "ok\x1b[2J", ["row.values.status", "control character"]),
    *[("upsert", "row.values.counter", value, ["row.values.counter", "expected an integer",
                                                type_name])
      for value, type_name in ((2.5, "number"), (1.0, "number"), ("7", "string"),
                               (True, "boolean"), ([7], "array"))],
    ("upsert", "row.values.counter", BIG, ["row.values.counter", "outside"]),
    ("upsert", "row.values.counter", -BIG - 1, ["row.values.counter", "outside"]),
    ("upsert", "row.values.counter", 10**30, ["row.values.counter", "outside"]),
    ("snapshot", "rows[0].values.temperature", 10**400, ["temperature", "does not fit a double"]),
]  # fmt: skip


@pytest.mark.parametrize(("kind", "path", "value", "words"), WRONG)
def test_a_wrong_field_is_invalid_and_the_detail_names_field_and_type(
    kind: str, path: str, value: Any, words: list[str]
) -> None:
    record = parse(changed(kind, path, value))

    assert record.problem is Reason.INVALID, record.detail
    assert all(word in (record.detail or "") for word in words), record.detail
    assert record.lineage == LINEAGE and record.seq is None


@pytest.mark.parametrize(
    ("path", "value"),
    [("seq", 0), ("seq", BIG - 2), ("row.values.counter", BIG - 1),
     ("row.values.counter", -BIG), ("row.values.counter", 2**31), ("row.values.counter", -2**31),
     ("row.values.temperature", -1.7e308), ("row.values.humidity", 0),
     ("event_time", "1970-01-01T00:00:00Z"), ("event_time", "2099-12-31T23:59:59.999999999Z"),
     ("event_time", "2026-01-01T02:00:00+02:00"), ("row.row_id", "ü" * 128)],
)  # fmt: skip
def test_values_at_the_edges_of_their_range_are_accepted(path: str, value: Any) -> None:
    record = parse(changed("upsert", path, value))

    assert record.problem is None, record.detail


def test_offsets_are_converted_to_utc_and_fractions_kept_to_the_microsecond() -> None:
    shifted = parse(changed("end", "event_time", "2026-01-01T02:00:00.1234567+02:00"))
    assert shifted.event_time == 1_767_225_600_123_456


def test_value_fields_may_be_missing_or_null_and_unknown_ones_are_ignored() -> None:
    body = changed("upsert", "row.values", {"temperature": None, "colour": "red", "counter": 1})
    record = parse(body)
    assert record.problem is None
    assert record.values == {
        "temperature": None,
        "humidity": None,
        "pressure": None,
        "status": None,
        "counter": 1,
    }


def test_a_snapshot_naming_a_row_twice_is_invalid() -> None:
    rows = [{"row_id": "r1", "values": VALUES}, {"row_id": "r1", "values": VALUES}]
    record = parse(changed("snapshot", "rows", rows))
    assert record.problem is Reason.INVALID and "appears twice" in (record.detail or "")


@pytest.mark.parametrize(
    ("raw", "words"),
    [(b'{"session_id": "s1", "seq": 1', ["not JSON"]),
     (b"\xff\xfe{}", ["not UTF-8"]),
     ("\ufeff" + json.dumps(GOOD["end"]), ["byte order mark"]),
     (b"[1, 2]", ["not a JSON object: array"]),
     (b'"s1"', ["not a JSON object: string"]),
     (b"null", ["not a JSON object: null"]),
     (b"[" * 20_000 + b"]" * 20_000, ["nested too deep"]),
     (json.dumps({**GOOD["end"], "extra": 0}).replace("0}", "[" * 20_000 + "]" * 20_000 + "}"),
      ["nested too deep"]),
     (b'{"session_id": "s1", "seq": ' + b"1" * 5000 + b"}", ["not JSON"]),
     (b"", ["not JSON"])],
)  # fmt: skip
def test_bytes_that_are_not_one_json_object_are_unparsable(
    raw: bytes | str, words: list[str]
) -> None:
    record = parse(raw.encode() if isinstance(raw, str) else raw)
    assert record.problem is Reason.UNPARSABLE
    assert all(word in (record.detail or "") for word in words), record.detail


def test_nan_and_infinity_are_not_json_numbers() -> None:
    for literal in ("NaN", "Infinity", "-Infinity"):
        raw = json.dumps(GOOD["end"]).replace('"seq": 3', f'"seq": {literal}').encode()
        record = parse(raw)
        assert record.problem is Reason.UNPARSABLE
        assert f"not JSON: {literal} is not a JSON number" in (record.detail or "")


def test_a_key_repeated_in_one_object_is_invalid_whichever_value_wins() -> None:
    raw = json.dumps(GOOD["end"])[:-1] + ', "seq": 4}'
    record = parse(raw.encode())
    assert record.problem is Reason.INVALID and '"seq": key repeated' in (record.detail or "")


def test_an_unknown_kind_is_its_own_reason() -> None:
    for kind in ("reset", 5, None):
        record = parse(changed("end", "kind", kind))
        assert record.problem is Reason.UNKNOWN_KIND, kind
        assert "kind" in (record.detail or "")


def test_a_session_id_that_differs_from_the_kafka_key_is_invalid() -> None:
    record = parse(GOOD["end"], key=b"s2")
    assert record.problem is Reason.INVALID
    assert "differs from the Kafka key 's2'" in (record.detail or "")


def test_a_record_without_a_key_is_judged_by_its_value_alone() -> None:
    assert parse(GOOD["end"], key=None).problem is None


def test_a_sensor_id_that_differs_from_the_topic_is_invalid() -> None:
    record = parse(GOOD["end"], sensor="b")
    assert record.problem is Reason.INVALID
    assert "sensor_id: 'a' differs from the topic's sensor 'b'" in (record.detail or "")


def test_a_value_whose_session_differs_from_its_group_is_invalid() -> None:
    record = parse_record("", json.dumps(GOOD["end"]).encode(), LINEAGE, None, None)
    assert record.problem is Reason.INVALID and "session_id" in (record.detail or "")


def test_an_unexpected_error_while_parsing_is_an_internal_violation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(body: Any) -> protocol.Message:
        raise KeyError("surprise")

    monkeypatch.setattr(protocol, "parse_message", broken)
    record = parse(GOOD["end"])
    assert record.problem is Reason.INTERNAL and "KeyError" in (record.detail or "")


def test_the_protocol_doc_lists_every_field_as_the_code_defines_it() -> None:
    doc = Path(PROJECT_ROOT, "docs", "protocol.md").read_text()
    for field in (*protocol.ENVELOPE, protocol.OP, protocol.ROW_ID, *protocol.VALUE_FIELDS):
        assert protocol.doc_row(field) in doc, f"docs/protocol.md lacks: {protocol.doc_row(field)}"
