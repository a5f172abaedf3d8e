"""One session's rows of a micro-batch (as `silver.parsing` makes them) -> silver's outputs.

Nearly every batch of a session is a run of records in sequence, read in the JVM, on an
open session: `_in_order` applies such a run with one loop over its records and row ids,
and the changes it makes are the input rows themselves, taken column-wise, with an `op`.
The first record that needs judging (out of sequence, not plain, a closed or broken
session, a lax mode, tracing) and every record after it go to `SessionMachine`, one by
one. Both change the same `SessionState`; a test holds their outputs equal.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from silver import outputs, row_changes, sessions, state_transitions, violations
from silver.parsing import INTEGER_VALUES, VALUES
from silver.session_machine import (
    Clock,
    IntegrityError,
    Lineage,
    Mode,
    Output,
    Policy,
    Reason,
    Record,
    SessionMachine,
    SessionState,
    Status,
    Violation,
    parse_record,
)

VALUE_NAMES = tuple(f.name for f in VALUES)
_IN_ORDER_MODES = (Mode.STRICT, Mode.ORDERED, Mode.WINDOW)
"""Modes that treat a record in sequence the same way (window mode with nothing buffered)."""


def process(
    machine: SessionMachine, state: SessionState, rows: pd.DataFrame, topic_sensor: str | None
) -> list[pd.DataFrame]:
    """The row changes and violations of a session's rows, sorted by (partition, offset,
    pos), as frames to hand to Spark one by one; `state` is changed in place. `topic_sensor`
    is the sensor the session's topic names."""
    batch = _Batch(rows)
    done, fast = 0, _Changes()
    if machine.mode in _IN_ORDER_MODES and not machine.trace and not state.pending:
        done = _in_order(state, batch, fast, machine)
    records = [batch.record(i, state.session_id, topic_sensor) for i in range(done, batch.records)]
    slow = to_frame(machine.process(state, records)) if records else None
    fast_latest = _mark_latest(fast, batch, slow)
    if (batch.times > 0).any():  # 0: no Kafka timestamp, which moves no clock
        state.last_time = max(state.last_time or 0, int(batch.times.max()))
    return [
        frame
        for frame in (fast.frame(batch, state, fast_latest), slow)
        if frame is not None and len(frame)
    ]


def _mark_latest(fast: _Changes, batch: _Batch, slow: pd.DataFrame | None) -> np.ndarray:
    """Mark each row's last change in the batch, by (seq, offset, ordinal) as silver
    orders them: in `slow`'s `latest` column, and returned for `fast`'s changes."""
    best: dict[str, tuple[tuple[Any, ...], bool, Any]] = {}
    # fast changes come in sequence, so the last one of a row ranks highest
    for row_id, i in {row_id: i for i, row_id in enumerate(fast.row_ids)}.items():
        source = fast.sources[i]
        rank = (batch.seqs[source], int(batch.offsets[source]), fast.ordinals[i])
        best[row_id] = (rank, True, int(i))
    if slow is not None:
        is_change = (slow["output"] == row_changes.NAME).to_numpy()
        for j in np.flatnonzero(is_change):
            row_id = slow["row_id"].iat[j]
            rank = (slow["seq"].iat[j], slow["offset"].iat[j], slow["ordinal"].iat[j])
            if row_id not in best or rank > best[row_id][0]:
                best[row_id] = (rank, False, j)
        latest = np.zeros(len(slow), dtype=bool)
        latest[[j for _, in_fast, j in best.values() if not in_fast]] = True
        slow[outputs.LATEST] = pd.array(latest, dtype="boolean")
    marked = np.zeros(len(fast.row_ids), dtype=bool)
    marked[[i for _, in_fast, i in best.values() if in_fast]] = True
    return marked


class _Batch:
    """A session's input rows as plain arrays, and where each record's rows start."""

    def __init__(self, rows: pd.DataFrame) -> None:
        self.rows = rows
        self.offsets = rows["offset"].to_numpy()
        self.partitions = rows["partition"].to_numpy()
        new_record = np.ones(len(rows), dtype=bool)
        # Each row names its topic: a session may span the incarnations of a re-created one.
        self.topics = rows["topic"].to_numpy()
        new_record[1:] = (
            (self.offsets[1:] != self.offsets[:-1])
            | (self.partitions[1:] != self.partitions[:-1])
            | (self.topics[1:] != self.topics[:-1])
        )
        self.starts = np.flatnonzero(new_record).tolist()
        self.ends = [*self.starts[1:], len(rows)]
        self.records = len(self.starts)
        self.plain = rows["plain"].to_numpy().tolist()
        self.kinds = rows["kind"].tolist()
        # A column without a value in the batch (only end records: no op) may come as
        # float NaN rather than None; the state machine, and the state, take None.
        self.ops = [op if isinstance(op, str) else None for op in rows["op"].tolist()]
        self.seqs = rows["seq"].tolist()
        self.row_ids = rows["row_id"].tolist()
        self.event_times = rows["event_time"].tolist()
        self.times = rows["kafka_time"].to_numpy()

    def column(self, name: str) -> np.ndarray:
        return self.rows[name].to_numpy()

    def lineage(self, row: int) -> Lineage:
        return Lineage(str(self.topics[row]), int(self.partitions[row]), int(self.offsets[row]))

    def values(self, row: int) -> dict[str, Any]:
        found = {}
        for name in VALUE_NAMES:
            value = self.rows[name].iat[row]
            if name in INTEGER_VALUES:
                value = None if self.rows[f"{name}_null"].iat[row] else int(value)
            elif isinstance(value, float) and np.isnan(value):
                value = None
            found[name] = value
        return found

    def record(self, index: int, session_id: str, topic_sensor: str | None) -> Record:
        """The index-th record, for the state machine: typed from the JVM's columns, or
        parsed from its bytes by the protocol."""
        start, end = self.starts[index], self.ends[index]
        lineage = self.lineage(start)
        if not self.plain[start]:
            key, raw = self.rows["key"].iat[start], self.rows["value"].iat[start]
            # pandas may show a null as NaN
            key = key if isinstance(key, bytes) else None
            return parse_record(session_id, raw, lineage, key, topic_sensor)
        kind, row_id = self.kinds[start], self.row_ids[start]
        rows = values = None
        if kind == "snapshot":
            rows = {self.row_ids[r]: self.values(r) for r in range(start, end) if self.row_ids[r]}
        elif kind == "update" and self.ops[start] == "upsert":
            values = self.values(start)
        return Record(
            lineage,
            None,
            session_id,
            self.rows["sensor_id"].iat[start],
            int(self.seqs[start]),
            kind,
            int(self.event_times[start]),
            self.ops[start],
            row_id if kind == "update" else None,
            values,
            rows,
        )


@dataclass
class _Changes:
    """Row changes as positions in the batch: the row that holds the values (a delete's
    record's row, whose values are not used) and the op."""

    sources: list[int] = field(default_factory=list)
    row_ids: list[str] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    ordinals: list[int] = field(default_factory=list)

    def add(self, source: int, row_id: str, op: str, ordinal: int) -> None:
        self.sources.append(source)
        self.row_ids.append(row_id)
        self.ops.append(op)
        self.ordinals.append(ordinal)

    def frame(self, batch: _Batch, state: SessionState, latest: np.ndarray) -> pd.DataFrame | None:
        if not self.sources:
            return None
        sources = np.array(self.sources)
        deleted = np.array(self.ops) == "delete"
        columns: dict[str, Any] = {
            "output": row_changes.NAME,
            outputs.LATEST: latest,
            "session_id": state.session_id,
            "sensor_id": state.sensor_id,
            "row_id": np.array(self.row_ids, dtype=object),
            "op": np.array(self.ops, dtype=object),
            "seq": batch.column("seq")[sources],
            "ordinal": np.array(self.ordinals),
            "event_time": batch.column("event_time")[sources],
            "topic": batch.topics[sources],
            "partition": batch.partitions[sources],
            "offset": batch.offsets[sources],
        }
        for name in VALUE_NAMES:
            values = batch.column(name)[sources]
            if name in INTEGER_VALUES:
                mask = batch.column(f"{name}_null")[sources] | deleted
                columns[name] = pd.arrays.IntegerArray(values.astype("int64"), mask)
            elif deleted.any():
                columns[name] = np.where(
                    deleted, np.nan if values.dtype.kind == "f" else None, values
                )
            else:
                columns[name] = values
        return outputs.frame(columns, len(sources))


def _in_order(
    state: SessionState, batch: _Batch, changes: _Changes, machine: SessionMachine
) -> int:
    """Apply the batch's leading run of records that need no judging, as the machine
    would; the number of records applied."""
    applied = 0
    for index in range(batch.records):
        start = batch.starts[index]
        expected = 0 if state.last_seq is None else state.last_seq + 1
        if not batch.plain[start] or state.status is not Status.OPEN:
            break
        if batch.seqs[start] != expected or not _apply(state, batch, index, changes, machine):
            break
        state.last_seq = expected
        applied += 1
    if applied:
        # what the machine notes of every record, once for the run
        first, last = batch.starts[0], batch.starts[applied - 1]
        state.records += applied
        state.sensor_id = state.sensor_id or batch.rows["sensor_id"].iat[first]
        state.first_lineage = state.first_lineage or batch.lineage(first)
        state.last_lineage = batch.lineage(last)
        if state.first_event_time is None:
            state.first_event_time = batch.event_times[first]
        state.last_event_time = batch.event_times[last]
        if state.first_seq is None:
            state.first_seq = batch.seqs[first]
    return applied


def _apply(
    state: SessionState, batch: _Batch, index: int, changes: _Changes, machine: SessionMachine
) -> bool:
    """Apply one record in sequence as the machine would; False, changing nothing, if it
    needs judging."""
    start, end = batch.starts[index], batch.ends[index]
    kind, live = batch.kinds[start], state.row_ids
    if kind == "update":
        row_id = batch.row_ids[start]
        if not state.has_snapshot:
            return False
        if batch.ops[start] == "delete":
            if row_id in live:
                live.remove(row_id)
                changes.add(start, row_id, "delete", 0)
            elif machine.mode is Mode.STRICT:
                return False
        else:
            if row_id not in live and len(live) >= machine.max_rows:
                return False
            changes.add(start, row_id, "update" if row_id in live else "insert", 0)
            live.add(row_id)
        state.updates += 1
    elif kind == "snapshot":
        ids = [r for r in batch.row_ids[start:end] if r is not None]
        if len(ids) > machine.max_rows:
            return False
        ordinal = 0
        for row_id in sorted(live - set(ids)):
            changes.add(start, row_id, "delete", ordinal)
            ordinal += 1
        for row in range(start, start + len(ids)):
            changes.add(row, batch.row_ids[row], "snapshot", ordinal)
            ordinal += 1
        state.row_ids = set(ids)
        state.has_snapshot = True
        state.snapshots += 1
    else:
        state.status, state.rows_at_end = Status.CLOSED, len(live)
        state.row_ids = set()
    return True


def judge(
    machine: SessionMachine,
    state: SessionState,
    rows: pd.DataFrame,
    topic_sensor: str | None,
    clock: Clock,
) -> tuple[list[pd.DataFrame], SessionState, bool]:
    """The session's row changes and violations for a batch of its rows, the state they
    leave (a new session where a record came after the old one's tombstone), and whether
    they were judged (else the state is as it was).

    The session's clock moves with its records: where one comes later than the session's
    deadline, the session expires (or its tombstone goes) before that record is judged,
    as it would have in a batch of its own. Nothing raises but the `fail` policy: an error
    outside the state machine's own guard per record (typing the output, say) makes the
    batch's records `internal` violations and the state stays as it was, so the session
    goes on as if they had never come: its next record shows the gap.
    """
    try:
        parts: list[list[pd.DataFrame]] = []
        for part in _by_clock(rows, state, clock):
            expired = Output()
            if not clock.advance(machine, state, int(part["kafka_time"].iat[0]), expired):
                state = SessionState(state.session_id, state.sensor_id)
            if expired.violations:  # records it still waited for, rejected as it expired
                parts.append([to_frame(expired)])
            parts.append(process(machine, state, part, topic_sensor))
        return _latest_across(parts), state, True
    except IntegrityError:
        raise
    except Exception as error:
        batch = _Batch(rows)
        records = [batch.record(i, state.session_id, topic_sensor) for i in range(batch.records)]
        detail = f"handling the session's batch failed: {type(error).__name__}: {error}"[:500]
        found = [
            Violation(
                r.session_id, topic_sensor, Reason.INTERNAL, detail, None, r.seq, r.lineage, r.raw
            )
            for r in records
        ]
        if machine.policy is Policy.FAIL:
            raise IntegrityError(f"session {state.session_id}: {detail}") from None
        return [to_frame(Output(violations=found))], state, False


def _latest_across(parts: list[list[pd.DataFrame]]) -> list[pd.DataFrame]:
    """The frames of all parts, a row's last change marked in the last part that changed
    it only: a session reborn within the batch (its tombstone forgotten) changes rows the
    old one changed too, and a table takes one last change per row."""
    later: set[str] = set()
    for frames in reversed(parts):
        changed = set()
        for frame in frames:
            change = frame["output"] == row_changes.NAME
            if later:
                frame.loc[change & frame["row_id"].isin(later), outputs.LATEST] = False
            changed |= set(frame.loc[change, "row_id"])
        later |= changed
    return [frame for frames in parts for frame in frames]


def _by_clock(rows: pd.DataFrame, state: SessionState, clock: Clock) -> list[pd.DataFrame]:
    """The rows cut before every record that comes more than the timeout after all before
    it: only there can the session expire or its tombstone go."""
    times = rows["kafka_time"].to_numpy()
    # The latest time before each record (0: none yet; a record without a Kafka
    # timestamp carries 0 and moves no clock).
    before = np.maximum.accumulate(np.concatenate([[state.last_time or 0], times]))[:-1]
    cuts = np.flatnonzero((times > 0) & (before > 0) & (times > before + clock.timeout_ms))
    if not len(cuts):
        return [rows]
    return [rows.iloc[a:b] for a, b in zip([0, *cuts], [*cuts, len(rows)], strict=True) if a < b]


def rejected(rows: pd.DataFrame, topic_sensor: str, reason: Reason, detail: str) -> pd.DataFrame:
    """Every record of these rows (of any sessions) rejected for `reason`, no state
    changed: sessions a bound keeps out."""
    batch = _Batch(rows)
    sessions = rows["session_id"].to_numpy()
    found = []
    for index in range(batch.records):
        session_id = str(sessions[batch.starts[index]])
        record = batch.record(index, session_id, topic_sensor)
        found.append(
            Violation(
                session_id, topic_sensor, reason, detail, None, record.seq, record.lineage,
                record.raw,
            )
        )  # fmt: skip
    return to_frame(Output(violations=found))


def unkeyed(rows: pd.DataFrame, topic_sensor: str | None) -> pd.DataFrame:
    """Records that name no usable session: rejected for what parsing found, no state."""
    batch = _Batch(rows)
    found = []
    for index in range(batch.records):
        record = batch.record(index, "", topic_sensor)
        reason, detail = record.problem or Reason.INVALID, record.detail or "no session_id"
        found.append(
            Violation(
                None, record.sensor_id, reason, detail, None, None, record.lineage, record.raw
            )
        )
    return to_frame(Output(violations=found))


def to_frame(out: Output, session: SessionState | None = None) -> pd.DataFrame:
    """The machine's output as rows of the silver tables, the session's summary last.

    Each table's rows are numbered (`ordinal`) in the order their Kafka record produced
    them: a number that does not depend on how records were cut into micro-batches."""
    rows = [
        *({"output": row_changes.NAME, **row_changes.row(c)} for c in out.changes),
        *({"output": violations.NAME, **violations.row(v)} for v in out.violations),
        *({"output": state_transitions.NAME, **state_transitions.row(t)} for t in out.transitions),
        *([{"output": sessions.NAME, **sessions.row(session)}] if session else []),
    ]
    produced: Counter[tuple[Any, ...]] = Counter()
    for row in rows:
        record = (row["output"], row.get("topic"), row.get("partition"), row.get("offset"))
        row["ordinal"] = produced[record]
        produced[record] += 1
    return outputs.to_frame(rows)
