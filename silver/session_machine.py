"""The per-session state machine of silver: pure Python, no Spark.

`SessionMachine.process` takes one session's records in Kafka order (the caller sorts:
Spark hands a group's rows over in no particular order and in several chunks) and
rebuilds the session's table from snapshot + updates, checking `seq` as the session's
integrity mode demands. It returns what silver writes: row changes, rejected records
(violations) and, when tracing, every state transition.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from silver.session_state import (
    IntegrityError,
    Mode,
    Output,
    Policy,
    Reason,
    Record,
    RowChange,
    SeqRanges,
    SessionState,
    SessionStatus,
    Transition,
    Violation,
)


@dataclass(frozen=True)
class Clock:
    """A session's life in the data's own time: Kafka timestamps, never the pipeline's.

    A session with no record for `timeout_ms` after its last one has expired; what is left
    of an ended session (closed by its `end`, or expired) is a tombstone kept for as long
    again, so that a straggler is rejected as arriving after the end rather than opening a
    session of the same id. The stream moves this clock by each record's own time and, for
    sessions that receive none, by its event-time watermark: both end a session at the same
    instant of the data's time, so how records were cut into batches changes nothing."""

    timeout_ms: int

    def deadline(self, state: SessionState) -> int:
        """When the session expires, or its tombstone is evicted."""
        assert state.last_time is not None
        lives = 2 if state.status is SessionStatus.EXPIRED else 1
        return state.last_time + lives * self.timeout_ms

    def advance(self, machine: SessionMachine, state: SessionState, now: int, out: Output) -> bool:
        """Move the session to `now` (ms); False when nothing of it is left to hold. What
        expiring rejects goes to `out`."""
        if state.last_time is None:
            return True
        if (
            state.status in (SessionStatus.OPEN, SessionStatus.BROKEN)
            and self.deadline(state) < now
        ):
            machine.expire(state, out)
        return not (
            state.status in (SessionStatus.CLOSED, SessionStatus.EXPIRED)
            and self.deadline(state) < now
        )


@dataclass(frozen=True)
class SessionMachine:
    """How one session is judged: its mode, policy, window and rows bounds."""

    mode: Mode = Mode.STRICT
    policy: Policy = Policy.QUARANTINE
    window: int = 100
    trace: bool = False
    max_rows: int = 1_000_000
    """silver.bounds.rows_per_session: past it, a record that would add rows is rejected."""

    def process(self, state: SessionState, records: Iterable[Record]) -> Output:
        """Apply records (in Kafka order) to the state, in place; return what happened."""
        out = Output()
        for record in records:
            before = state.summary() if self.trace else {}
            try:
                action = self._one(state, record, out)
            except IntegrityError:
                raise
            except Exception as error:
                # A bug met by one record must not stop every session: the record is
                # rejected, naming the error, and its session follows its policy.
                detail = f"{type(error).__name__}: {error}"[:500]
                action = self._reject(state, record, out, Reason.INTERNAL, detail, None)
            if self.trace:
                out.transitions.append(
                    Transition(
                        state.session_id,
                        state.sensor_id,
                        action,
                        before,
                        state.summary(),
                        record.seq,
                        record.lineage,
                    )
                )
        return out

    def expire(self, state: SessionState, out: Output) -> None:
        """No record for longer than the timeout: the session is over; what is left is a
        tombstone of counters, as after an `end`. Records still waiting for the ones
        before them (`window` mode) are rejected into `out`: never applied, never lost."""
        self._reject_waiting(state, out, Reason.GAP, "when the session expired")
        state.status, state.rows_at_end = SessionStatus.EXPIRED, state.table_rows
        state.row_ids, state.pending, state.seen = set(), {}, SeqRanges()

    def _reject_waiting(self, state: SessionState, out: Output, reason: Reason, when: str) -> None:
        expected = 0 if state.last_seq is None else state.last_seq + 1
        detail = f"waiting for seq {expected} {when}"
        for seq in sorted(state.pending):
            self._reject(state, state.pending.pop(seq), out, reason, detail, expected, breaks=False)

    def _one(self, state: SessionState, record: Record, out: Output) -> str:
        _count(state, record)
        expected = 0 if state.last_seq is None else state.last_seq + 1

        if state.status in (SessionStatus.CLOSED, SessionStatus.EXPIRED):
            return self._reject(
                state, record, out, Reason.AFTER_END, f"session already {state.status}", expected
            )
        if record.problem:
            return self._reject(state, record, out, record.problem, record.detail or "", expected)
        assert record.seq is not None
        if state.status is SessionStatus.BROKEN:
            if record.kind == "snapshot":
                state.status, state.broken_at_seq = SessionStatus.OPEN, None
                return self._apply(state, record, out, action="resync")
            return self._reject(
                state,
                record,
                out,
                Reason.QUARANTINED,
                f"session broken at seq {state.broken_at_seq}; waiting for a snapshot",
                None,
                breaks=False,
            )
        if self.mode is Mode.NONE:
            return self._apply(state, record, out)
        if self.mode is Mode.ONCE:
            if record.seq in state.seen:
                return self._reject(
                    state, record, out, Reason.DUPLICATE, "seq already applied", None
                )
            state.seen.add(record.seq)
            return self._apply(state, record, out)
        if record.seq < expected:
            reason = Reason.DUPLICATE if record.seq == state.last_seq else Reason.OUT_OF_ORDER
            return self._reject(
                state, record, out, reason, f"seq {record.seq} after {state.last_seq}", expected
            )
        if record.seq == expected:
            action = self._apply(state, record, out)
            if self.mode is Mode.WINDOW:
                self._drain(state, out)
            return action
        # record.seq > expected: the records in between are missing, or late
        if self.mode is Mode.ORDERED:
            state.gaps += 1
            return self._apply(state, record, out, action="apply-after-gap")
        if self.mode is Mode.WINDOW:
            state.pending[record.seq] = record
            if len(state.pending) > self.window:
                self._give_up_waiting(state, out)
            return "buffer"
        state.gaps += 1
        return self._reject(
            state, record, out, Reason.GAP, f"expected seq {expected}, found {record.seq}", expected
        )

    def _drain(self, state: SessionState, out: Output) -> None:
        while state.last_seq is not None and state.last_seq + 1 in state.pending:
            self._apply(state, state.pending.pop(state.last_seq + 1), out)

    def _give_up_waiting(self, state: SessionState, out: Output) -> None:
        # The bound is exceeded: what is missing is declared lost, and the buffered records
        # are applied from the lowest seq on.
        expected = 0 if state.last_seq is None else state.last_seq + 1
        first = min(state.pending)
        state.gaps += 1
        detail = f"seq {expected}..{first - 1} missing after waiting for {self.window} records"
        out.violations.append(
            Violation.of(state, state.pending[first], Reason.GAP, detail, expected)
        )
        self._apply(state, state.pending.pop(first), out)
        self._drain(state, out)

    def _reject(
        self,
        state: SessionState,
        record: Record,
        out: Output,
        reason: Reason,
        detail: str,
        expected: int | None,
        breaks: bool = True,
    ) -> str:
        state.rejected += 1
        out.violations.append(Violation.of(state, record, reason, detail, expected))
        lenient = self.mode is not Mode.STRICT or reason is Reason.AFTER_END
        if not breaks or lenient:
            return f"reject:{reason}"
        if self.policy is Policy.FAIL:
            where = f"{record.lineage.topic}/{record.lineage.partition}@{record.lineage.offset}"
            found = "unreadable" if record.seq is None else record.seq
            raise IntegrityError(
                f"integrity violation ({reason}) in session {state.session_id} at "
                f"{where}: expected seq {expected}, found {found}: {detail}"
            )
        state.status, state.broken_at_seq = SessionStatus.BROKEN, expected
        return f"reject:{reason}:broken"

    def _apply(
        self, state: SessionState, record: Record, out: Output, action: str = "apply"
    ) -> str:
        assert record.seq is not None
        if refused := self._refusal(state, record):
            return self._reject(state, record, out, *refused, record.seq)
        self._advance(state, record.seq)
        if record.kind == "snapshot":
            _apply_snapshot(state, record, out)
        elif record.kind == "update":
            _apply_update(state, record, out)
        else:
            # What is left of a closed session is a tombstone of counters, kept until the
            # timeout so that a straggler is recognised as arriving after the end.
            self._reject_waiting(
                state, out, Reason.AFTER_END, f"when the session ended at seq {record.seq}"
            )
            state.status, state.rows_at_end = SessionStatus.CLOSED, len(state.row_ids)
            state.row_ids, state.pending, state.seen = set(), {}, SeqRanges()
        return action

    def _refusal(self, state: SessionState, record: Record) -> tuple[Reason, str] | None:
        """Why `record`, next in sequence, is rejected rather than applied, if it is."""
        if record.kind == "update" and not state.has_snapshot:
            return Reason.UPDATE_BEFORE_SNAPSHOT, "update before the session's first snapshot"
        unknown_row = record.op == "delete" and record.row_id not in state.row_ids
        if record.kind == "update" and unknown_row and self.mode is Mode.STRICT:
            return Reason.UNKNOWN_ROW, f"delete of unknown row {record.row_id}"
        if self._too_many_rows(state, record):
            return Reason.ROWS_BOUND, (
                f"the session's table would pass {self.max_rows:,} rows "
                "(silver.bounds.rows_per_session)"
            )
        return None

    def _too_many_rows(self, state: SessionState, record: Record) -> bool:
        if record.kind == "snapshot":
            return len(record.rows or ()) > self.max_rows
        return (
            record.kind == "update"
            and record.op == "upsert"
            and record.row_id not in state.row_ids
            and len(state.row_ids) >= self.max_rows
        )

    @staticmethod
    def _advance(state: SessionState, seq: int) -> None:
        if state.first_seq is None:
            state.first_seq = seq
        state.last_seq = seq if state.last_seq is None else max(state.last_seq, seq)


def _count(state: SessionState, record: Record) -> None:
    """What the session's row says of every record it received, whatever it did."""
    state.records += 1
    state.sensor_id = state.sensor_id or record.sensor_id
    if state.first_lineage is None:
        state.first_lineage = record.lineage
    state.last_lineage = record.lineage
    if record.event_time is not None:
        if state.first_event_time is None:
            state.first_event_time = record.event_time
        state.last_event_time = record.event_time


def _apply_snapshot(state: SessionState, record: Record, out: Output) -> None:
    """The session's table becomes the snapshot's rows: those it lacks are deleted."""
    assert record.rows is not None
    for row_id in sorted(state.row_ids - record.rows.keys()):
        out.changes.append(_row_change(state, record, row_id, "delete", None))
    for row_id, values in record.rows.items():
        out.changes.append(_row_change(state, record, row_id, "snapshot", values))
    state.row_ids = set(record.rows)
    state.has_snapshot = True
    state.snapshots += 1


def _apply_update(state: SessionState, record: Record, out: Output) -> None:
    """One row inserted, updated or deleted (a delete of a row it lacks changes nothing)."""
    assert record.row_id is not None
    state.updates += 1
    if record.op == "delete":
        if record.row_id in state.row_ids:
            state.row_ids.remove(record.row_id)
            out.changes.append(_row_change(state, record, record.row_id, "delete", None))
        return
    assert record.values is not None
    op = "update" if record.row_id in state.row_ids else "insert"
    out.changes.append(_row_change(state, record, record.row_id, op, record.values))
    state.row_ids.add(record.row_id)


def _row_change(
    state: SessionState, record: Record, row_id: str, op: str, values: dict[str, Any] | None
) -> RowChange:
    assert record.seq is not None
    return RowChange(
        state.session_id,
        state.sensor_id,
        row_id,
        op,
        values,
        record.seq,
        record.event_time,
        record.lineage,
    )
