"""A small, independent reconstruction of silver (strict mode, quarantine policy).

Written apart from `silver.session_machine`, in the plainest way, so that tests compare
the streaming job against a second opinion rather than against itself.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from lakehouse.ops.producer import MAX_VALUE_BYTES

ROW_FIELDS = ("temperature", "humidity", "pressure", "status", "counter")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

Session = tuple[str, str]
"""(topic, session id): a session is its sensor's (its topic's) and its id."""
Lineage = tuple[str, int, int]
"""(topic, partition, offset) of a Kafka record."""


class SessionSummary(NamedTuple):
    """A session's row of `silver.sessions` but its key and batch; times in microseconds."""

    sensor_id: str
    status: str
    first_seq: int | None
    last_seq: int | None
    records: int
    snapshots: int
    updates: int
    rejected: int
    gaps: int
    table_rows: int
    first_event_time: int | None
    last_event_time: int | None
    first: Lineage
    last: Lineage


@dataclass
class Expected:
    """Silver's four tables as (key, value) pairs, each key first naming its session: the
    reference's, where each key is once, or what silver holds, where a key may be twice."""

    rows: list[tuple[tuple[Session, str], tuple[Any, ...]]] = field(default_factory=list)
    """((session, row), (values..., seq, topic, partition, offset))"""
    sessions: list[tuple[Session, SessionSummary]] = field(default_factory=list)
    violations: list[tuple[tuple[Session | None, str, str, int, int], tuple[()]]] = field(
        default_factory=list
    )
    """((session, reason, topic, partition, offset), ())"""
    changes: list[tuple[tuple[Session, str, str, int], tuple[Any, ...]]] = field(
        default_factory=list
    )
    """((session, row, op, seq), (values..., sensor_id, event_time, topic, partition, offset))"""

    def tables(self) -> dict[str, list[tuple[Any, Any]]]:
        return {
            "session_rows": self.rows,
            "sessions": self.sessions,
            "violations": self.violations,
            "row_changes": self.changes,
        }


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


def sensor_of(topic: str, topic_prefix: str) -> str:
    """The sensor a topic names: what follows the prefix (the whole topic without it)."""
    return topic.removeprefix(topic_prefix)


def micros(event_time: str) -> int:
    """A protocol time as microseconds since the epoch, as silver keeps it."""
    return (datetime.fromisoformat(event_time) - EPOCH) // timedelta(microseconds=1)


def _unkeyed_reason(value: bytes) -> str:
    """Not a JSON object: unparsable; an object without a session id: invalid."""
    try:
        return "invalid" if isinstance(json.loads(value), dict) else "unparsable"
    except ValueError:
        return "unparsable"


def reconstruct(records: list[tuple[str, int, int, bytes]], topic_prefix: str) -> Expected:
    """records: (topic, partition, offset, value) in any order, of topics named
    `<topic_prefix><sensor>` (`kafka.topic_prefix`)."""
    expected = Expected()
    by_session: dict[Session | None, list[tuple[str, int, int, bytes]]] = defaultdict(list)
    for record in records:
        named = session_of(record[3])
        by_session[None if named is None else (record[0], named)].append(record)
    for topic, partition, offset, value in by_session.pop(None, []):
        expected.violations.append(((None, _unkeyed_reason(value), topic, partition, offset), ()))
    for session, items in by_session.items():
        assert session is not None  # the unnamed were popped above
        sensor = sensor_of(session[0], topic_prefix)
        _replay(session, sensor, sorted(items, key=lambda r: (r[1], r[2])), expected)
    return expected


def _replay(
    session: Session, sensor: str, items: list[tuple[str, int, int, bytes]], expected: Expected
) -> None:
    table: dict[str, tuple[Any, ...]] = {}
    first_seq: int | None = None
    last_seq: int | None = None
    status, seen_snapshot = "open", False
    rejected = snapshots = updates = gaps = 0
    times: list[int] = []  # the event times readable, in Kafka order

    def change(row: str, op: str, seq: int, values: tuple[Any, ...], m: dict[str, Any]) -> None:
        at = (*values, sensor, micros(m["event_time"]), *lineage)
        expected.changes.append(((session, row, op, seq), at))

    for topic, partition, offset, value in items:
        lineage = (topic, partition, offset)
        m = _parsed(value)
        if m is not None and _valid(m):
            times.append(micros(m["event_time"]))
        refused = _refusal(m, status, last_seq, seen_snapshot, table)
        if refused is not None:
            reason, breaks = refused
            rejected += 1
            gaps += reason == "gap"
            expected.violations.append(((session, reason, *lineage), ()))
            status = "broken" if breaks else status
            continue
        assert m is not None
        seq, kind = m["seq"], m.get("kind")
        status = "open" if status == "broken" else status
        updates += kind == "update"
        first_seq = seq if first_seq is None else first_seq
        last_seq = seq if last_seq is None else max(last_seq, seq)
        if kind == "snapshot":
            new = {r["row_id"]: tuple(r["values"][f] for f in ROW_FIELDS) for r in m["rows"]}
            for row in sorted(table.keys() - new.keys()):
                change(row, "delete", seq, (None,) * len(ROW_FIELDS), m)
            for row, values in new.items():
                change(row, "snapshot", seq, values, m)
            table = {row: (*v, seq, *lineage) for row, v in new.items()}
            seen_snapshot, snapshots = True, snapshots + 1
        elif kind == "update" and m["op"] == "delete":
            del table[m["row_id"]]
            change(m["row_id"], "delete", seq, (None,) * len(ROW_FIELDS), m)
        elif kind == "update":
            row, values = m["row"]["row_id"], tuple(m["row"]["values"][f] for f in ROW_FIELDS)
            change(row, "update" if row in table else "insert", seq, values, m)
            table[row] = (*values, seq, *lineage)
        else:
            status = "closed"
    (t0, p0, o0, _), (t1, p1, o1, _) = items[0], items[-1]
    first, last = (t0, p0, o0), (t1, p1, o1)
    summary = SessionSummary(
        sensor, status, first_seq, last_seq, len(items), snapshots, updates,
        rejected, gaps, len(table), times[0] if times else None, times[-1] if times else None,
        first, last,
    )  # fmt: skip
    expected.sessions.append((session, summary))
    expected.rows += [((session, row), values) for row, values in table.items()]


def _valid(m: dict[str, Any]) -> bool:
    """Whether a message's envelope is readable: its event time then counts for its session."""
    return isinstance(m.get("seq"), int) and "event_time" in m and "sensor_id" in m


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
    if not _valid(m):
        return "invalid", True
    seq, kind = m["seq"], m.get("kind")
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
