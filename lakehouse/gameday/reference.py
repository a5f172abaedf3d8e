"""A small, independent reconstruction of silver (strict mode, quarantine policy).

Written apart from `silver.session_machine`, in the plainest way, so that tests compare
the streaming job against a second opinion rather than against itself.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from lakehouse.ops.producer import MAX_VALUE_BYTES

ROW_FIELDS = ("temperature", "humidity", "pressure", "status", "counter")


Session = tuple[str, str]
"""(topic, session id): a session is its sensor's (its topic's) and its id."""


@dataclass
class Expected:
    rows: dict[tuple[Session, str], tuple[Any, ...]] = field(default_factory=dict)
    """(session, row) -> (values..., seq, topic, partition, offset)"""
    sessions: dict[Session, tuple[str, int | None, int, int, int]] = field(default_factory=dict)
    """session -> (status, last_seq, records, rejected, table rows)"""
    violations: Counter[tuple[Session | None, str, int]] = field(default_factory=Counter)
    """(session, reason, offset) -> count"""
    changes: Counter[tuple[Session, str, str, int]] = field(default_factory=Counter)
    """(session, row, op, seq) -> count"""


def reaches_silver(key: bytes | None, value: bytes | None) -> bool:
    """Whether bronze's gate passes a record on to silver: keyed, with a value within the
    protocol's bound (`expectations/bronze/sensor_records.json` quarantines the others)."""
    return key is not None and value is not None and len(value) <= MAX_VALUE_BYTES


def session_of(value: bytes) -> str | None:
    """A value that is not JSON names no session, even if its first bytes look like one."""
    try:
        body = json.loads(value)
    except ValueError:
        return None
    return body.get("session_id") if isinstance(body, dict) else None


def _unkeyed_reason(value: bytes) -> str:
    """Not a JSON object: unparsable; an object without a session id: invalid."""
    try:
        return "invalid" if isinstance(json.loads(value), dict) else "unparsable"
    except ValueError:
        return "unparsable"


def reconstruct(records: list[tuple[str, int, int, bytes]]) -> Expected:
    """records: (topic, partition, offset, value) in any order."""
    expected = Expected()
    by_session: dict[Session | None, list[tuple[str, int, int, bytes]]] = defaultdict(list)
    for record in records:
        named = session_of(record[3])
        by_session[None if named is None else (record[0], named)].append(record)
    for _, _, offset, value in by_session.pop(None, []):
        expected.violations[(None, _unkeyed_reason(value), offset)] += 1
    for session, items in by_session.items():
        assert session is not None  # the unnamed were popped above
        _replay(session, sorted(items, key=lambda r: (r[1], r[2])), expected)
    return expected


def _replay(session: Session, items: list[tuple[str, int, int, bytes]], expected: Expected) -> None:
    table: dict[str, tuple[Any, ...]] = {}
    last_seq: int | None = None
    status, seen_snapshot, rejected = "open", False, 0
    for topic, partition, offset, value in items:
        lineage = (topic, partition, offset)
        m = _parsed(value)
        refused = _refusal(m, status, last_seq, seen_snapshot, table)
        if refused is not None:
            reason, breaks = refused
            rejected += 1
            expected.violations[(session, reason, offset)] += 1
            status = "broken" if breaks else status
            continue
        assert m is not None
        seq, kind = m["seq"], m.get("kind")
        status = "open" if status == "broken" else status
        last_seq = seq if last_seq is None else max(last_seq, seq)
        if kind == "snapshot":
            new = {r["row_id"]: tuple(r["values"][f] for f in ROW_FIELDS) for r in m["rows"]}
            for row in table.keys() - new.keys():
                expected.changes[(session, row, "delete", seq)] += 1
            for row in new:
                expected.changes[(session, row, "snapshot", seq)] += 1
            table = {row: (*v, seq, *lineage) for row, v in new.items()}
            seen_snapshot = True
        elif kind == "update" and m["op"] == "delete":
            del table[m["row_id"]]
            expected.changes[(session, m["row_id"], "delete", seq)] += 1
        elif kind == "update":
            row = m["row"]["row_id"]
            op = "update" if row in table else "insert"
            table[row] = (*(m["row"]["values"][f] for f in ROW_FIELDS), seq, *lineage)
            expected.changes[(session, row, op, seq)] += 1
        else:
            status = "closed"
    expected.sessions[session] = (status, last_seq, len(items), rejected, len(table))
    for row, values in table.items():
        expected.rows[(session, row)] = values


def _parsed(value: bytes) -> dict[str, Any] | None:
    try:
        parsed: dict[str, Any] = json.loads(value)
    except ValueError:
        return None
    return parsed


def _refusal(
    m: dict[str, Any] | None,
    status: str,
    last_seq: int | None,
    seen_snapshot: bool,
    table: dict[str, tuple[Any, ...]],
) -> tuple[str, bool] | None:
    """Why the session refuses the record `m` (None: unparsable), and whether that breaks
    the session; None if it takes it."""
    if status == "closed":
        return "after_end", False
    if m is None:
        return "unparsable", True
    seq, kind = m.get("seq"), m.get("kind")
    if not isinstance(seq, int) or "event_time" not in m or "sensor_id" not in m:
        return "invalid", True
    if status == "broken" and kind != "snapshot":
        return "quarantined", False
    want = 0 if last_seq is None else last_seq + 1
    if status != "broken" and seq > want:
        return "gap", True
    if status != "broken" and seq < want:
        return "duplicate" if seq == last_seq else "out_of_order", True
    if kind == "update" and not seen_snapshot:
        return "update_before_snapshot", True
    if kind == "update" and m["op"] == "delete" and m["row_id"] not in table:
        return "unknown_row", True
    return None
