"""What silver's session machine reads, holds and writes: a record as the protocol reads it
(`parse_record`), a session's state, and the outputs (row changes, violations, state
transitions). Pure Python, no Spark; `silver.session_machine` judges records with them.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from silver import protocol

STATE_VERSION = 5
"""Bump when `SessionState` or how silver keys it changes: old checkpoints are then
refused, not misread. 4: sessions held per sensor, timed by Kafka timestamps; 5: held by
the session machine in the JVM (`SensorSessions.java`), its state in Java's serialization,
which reads a state saved before a field was added (the field at its default) and
nothing else changed: any other change to the Java `SessionState`, `Record` or
`SeqRanges` bumps this."""


class Mode(StrEnum):
    STRICT = "strict"  # every record carries exactly last_seq + 1
    ORDERED = "ordered"  # stale and duplicate records dropped, gaps accepted
    WINDOW = "window"  # out-of-order records buffered up to a bound, applied in seq order
    ONCE = "once"  # duplicates dropped, order does not matter
    NONE = "none"  # applied as they come


class Policy(StrEnum):
    FAIL = "fail"  # stop the query on the first violation
    QUARANTINE = "quarantine"  # break the session until the next snapshot resyncs it


class SessionStatus(StrEnum):
    OPEN = "open"
    CLOSED = "closed"
    EXPIRED = "expired"
    BROKEN = "broken"


class Reason(StrEnum):
    UNPARSABLE = "unparsable"  # not a JSON object
    INVALID = "invalid"  # a field breaks the protocol: missing, wrong type, out of bounds
    UNKNOWN_KIND = "unknown_kind"
    GAP = "gap"  # seq skipped ahead of last_seq + 1
    DUPLICATE = "duplicate"  # seq equal to one already applied
    OUT_OF_ORDER = "out_of_order"  # seq behind the last one applied
    UPDATE_BEFORE_SNAPSHOT = "update_before_snapshot"
    UNKNOWN_ROW = "unknown_row"  # delete of a row the table does not have
    AFTER_END = "after_end"  # anything after the session's end
    QUARANTINED = "quarantined"  # the session is broken; waiting for a snapshot
    ROWS_BOUND = "rows_bound"  # the session's table would pass silver.bounds.rows_per_session
    SESSIONS_BOUND = "sessions_bound"  # the sensor holds silver.bounds.sessions_per_sensor
    NO_SNAPSHOT_BOUND = "no_snapshot_bound"  # ... silver.bounds.sessions_without_snapshot
    INTERNAL = "internal"  # handling the record failed unexpectedly (a bug, named in detail)


@dataclass(frozen=True)
class Lineage:
    """Where a record came from: the Kafka record bronze kept."""

    topic: str
    partition: int
    offset: int

    def columns(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset}


@dataclass(frozen=True)
class Record:
    """One bronze record of a session, parsed as far as it goes."""

    lineage: Lineage
    raw: bytes | None
    """None where the JVM read the record: silver looks its bytes up in bronze by lineage
    if a violation needs them."""
    session_id: str
    sensor_id: str | None = None
    seq: int | None = None
    kind: str | None = None
    event_time: int | None = None
    """Microseconds since the epoch, UTC."""
    op: str | None = None
    row_id: str | None = None
    values: dict[str, Any] | None = None
    rows: dict[str, dict[str, Any]] | None = None
    problem: Reason | None = None
    detail: str | None = None


def parse_record(
    session_id: str,
    raw: bytes,
    lineage: Lineage,
    key: bytes | None = None,
    topic_sensor: str | None = None,
) -> Record:
    """Read a value by the protocol (`silver.protocol`); a record that breaks it carries
    `problem` and a detail naming the field. Never raises.

    `session_id` is the session the record was grouped under, `key` its Kafka key and
    `topic_sensor` the sensor its topic names: a message must agree with all three.
    """

    def bad(reason: Reason, detail: str) -> Record:
        return Record(lineage, raw, session_id, problem=reason, detail=detail)

    try:
        message = protocol.parse_message(protocol.decode(raw))
        if message.session_id != session_id:
            raise protocol.ProtocolError("session_id: not usable as a session key")
        if key is not None and key != session_id.encode():
            raise protocol.ProtocolError(
                f"session_id: {session_id!r} differs from the Kafka key "
                f"{key[:60].decode('utf-8', 'replace')!r}"
            )
        if topic_sensor is not None and message.sensor_id != topic_sensor:
            raise protocol.ProtocolError(
                f"sensor_id: {message.sensor_id!r} differs from the topic's sensor {topic_sensor!r}"
            )
    except protocol.Unparsable as error:
        return bad(Reason.UNPARSABLE, str(error))
    except protocol.UnknownKind as error:
        return bad(Reason.UNKNOWN_KIND, str(error))
    except protocol.ProtocolError as error:
        return bad(Reason.INVALID, str(error))
    except Exception as error:  # a bug in parsing must not stop the stream
        return bad(Reason.INTERNAL, f"parsing failed: {type(error).__name__}: {error}"[:500])
    return Record(
        lineage,
        raw,
        session_id,
        message.sensor_id,
        message.seq,
        message.kind,
        message.event_time,
        message.op,
        message.row_id,
        message.values,
        message.rows,
    )


@dataclass
class SeqRanges:
    """Sequence numbers as sorted, disjoint inclusive ranges `[low, high]`: what a `once`
    session applied. A sensor sends in order with a few records late, so a session of a
    million updates holds a handful of ranges where a set would hold a million numbers
    (benchmarks/once_state.py)."""

    ranges: list[list[int]] = field(default_factory=list)

    def __contains__(self, seq: int) -> bool:
        i = bisect.bisect_right(self.ranges, seq, key=lambda r: r[0])
        return i > 0 and self.ranges[i - 1][1] >= seq

    def add(self, seq: int) -> None:
        ranges = self.ranges
        i = bisect.bisect_right(ranges, seq, key=lambda r: r[0])  # ranges[:i] start <= seq
        if i and ranges[i - 1][1] >= seq:
            return
        after_previous = i > 0 and ranges[i - 1][1] == seq - 1
        before_next = i < len(ranges) and ranges[i][0] == seq + 1
        if after_previous and before_next:
            ranges[i - 1][1] = ranges.pop(i)[1]
        elif after_previous:
            ranges[i - 1][1] = seq
        elif before_next:
            ranges[i][0] = seq
        else:
            ranges.insert(i, [seq, seq])

    @classmethod
    def from_json(cls, body: list[Any]) -> SeqRanges:
        """From its ranges, or from seqs listed one by one (as state version 4 first
        kept them: still read, never written)."""
        if all(isinstance(item, list) for item in body):
            return cls([list(item) for item in body])
        seqs = cls()
        for seq in body:
            seqs.add(seq)
        return seqs


@dataclass
class SessionState:
    """Everything silver remembers about one live session between micro-batches."""

    session_id: str
    sensor_id: str | None = None
    status: SessionStatus = SessionStatus.OPEN
    last_seq: int | None = None
    has_snapshot: bool = False
    row_ids: set[str] = field(default_factory=set)
    """The rows the session's table holds now; their values live in silver's tables."""
    first_seq: int | None = None
    records: int = 0
    snapshots: int = 0
    updates: int = 0
    rejected: int = 0
    gaps: int = 0
    broken_at_seq: int | None = None
    first_event_time: int | None = None
    last_event_time: int | None = None
    first_lineage: Lineage | None = None
    last_lineage: Lineage | None = None
    pending: dict[int, Record] = field(default_factory=dict)
    """`window` mode: records ahead of the next seq, waiting for the ones before them."""
    seen: SeqRanges = field(default_factory=SeqRanges)
    """`once` mode: every seq applied so far."""
    rows_at_end: int | None = None
    """Rows when the session ended: its row ids are dropped from state then."""
    last_time: int | None = None
    """The latest Kafka timestamp (ms) among its records: the session's clock (`Clock`)."""

    @property
    def table_rows(self) -> int:
        return len(self.row_ids) if self.rows_at_end is None else self.rows_at_end

    def to_json(self) -> str:
        body = asdict(self)
        body["pending"] = [_record_to_dict(r) for r in self.pending.values()]
        body["seen"] = self.seen.ranges
        body["row_ids"] = list(self.row_ids)
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> SessionState:
        body = json.loads(text)
        for name in ("first_lineage", "last_lineage"):
            body[name] = Lineage(**body[name]) if body[name] else None
        body["status"] = SessionStatus(body["status"])
        body["pending"] = {r["seq"]: _record_from_dict(r) for r in body["pending"]}
        body["seen"] = SeqRanges.from_json(body["seen"])
        body["row_ids"] = set(body["row_ids"])
        return cls(**body)

    def summary(self) -> dict[str, Any]:
        """Small enough for a trace row: no table, no buffers."""
        return {
            "status": str(self.status),
            "last_seq": self.last_seq,
            "rows": len(self.row_ids),
            "records": self.records,
            "rejected": self.rejected,
        }


def _record_to_dict(record: Record) -> dict[str, Any]:
    body = asdict(record)
    body["raw"] = None if record.raw is None else record.raw.decode("utf-8", "replace")
    return body


def _record_from_dict(body: dict[str, Any]) -> Record:
    body["lineage"] = Lineage(**body["lineage"])
    body["raw"] = None if body["raw"] is None else body["raw"].encode()
    body["problem"] = Reason(body["problem"]) if body["problem"] else None
    return Record(**body)


@dataclass(frozen=True)
class RowChange:
    """One row of one session's table changed by an accepted record."""

    session_id: str
    sensor_id: str | None
    row_id: str
    op: str  # insert | update | delete | snapshot
    values: dict[str, Any] | None
    seq: int
    event_time: int | None
    lineage: Lineage


@dataclass(frozen=True)
class Violation:
    """One rejected record and why."""

    session_id: str | None
    sensor_id: str | None
    reason: Reason
    detail: str
    expected_seq: int | None
    found_seq: int | None
    lineage: Lineage
    raw: bytes | None

    @classmethod
    def of(
        cls, state: SessionState, record: Record, reason: Reason, detail: str, expected: int | None
    ) -> Violation:
        """`record` rejected (or found after a gap) in `state`'s session: the session's
        sensor, or the record's where the session has not named one yet."""
        return cls(
            state.session_id,
            state.sensor_id or record.sensor_id,
            reason,
            detail,
            expected,
            record.seq,
            record.lineage,
            record.raw,
        )


@dataclass(frozen=True)
class Transition:
    """Trace: the session before and after one record."""

    session_id: str
    sensor_id: str | None
    action: str
    before: dict[str, Any]
    after: dict[str, Any]
    seq: int | None
    lineage: Lineage


class IntegrityError(Exception):
    """Raised under the `fail` policy; its message is the one line the job prints."""


@dataclass
class Output:
    changes: list[RowChange] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    transitions: list[Transition] = field(default_factory=list)
