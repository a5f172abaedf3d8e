"""The corpus of hostile records: each case, and the good session around it, as messages."""

# ruff: noqa: E501  (the corpus is a table: one case per line reads better than wrapped ones)
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

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
