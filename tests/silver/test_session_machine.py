from __future__ import annotations

import json

import pytest

from silver.session_machine import SessionMachine
from silver.session_state import (
    IntegrityError,
    Mode,
    Output,
    Policy,
    Reason,
    Record,
    RowChange,
    SessionState,
    SessionStatus,
)
from tests.support.records import delete, end, raw, rec, snapshot, upsert, vals

_CHANGES: dict[int, list[RowChange]] = {}
"""Every change each session's `run`s produced: state keeps row ids, the tables values."""


def run(machine: SessionMachine, *records: Record, state: SessionState | None = None):  # type: ignore[no-untyped-def]
    state = state or SessionState("s1")
    out = machine.process(state, records)
    _CHANGES.setdefault(id(state), []).extend(out.changes)
    return state, out


def restore(state: SessionState) -> SessionState:
    """The state as the next micro-batch reads it back, with the changes made so far."""
    restored = SessionState.from_json(state.to_json())
    _CHANGES[id(restored)] = list(_CHANGES.get(id(state), []))
    return restored


def temps(state: SessionState) -> dict[str, float]:
    """The session's table as silver's tables hold it (its changes replayed): it has the
    rows the state names."""
    table: dict[str, float] = {}
    for change in _CHANGES.get(id(state), []):
        if change.op == "delete":
            del table[change.row_id]
        else:
            assert change.values is not None
            table[change.row_id] = change.values["temperature"]
    assert set(table) == state.row_ids
    return table


STRICT = SessionMachine(Mode.STRICT, Policy.QUARANTINE)
STRICT_FAIL = SessionMachine(Mode.STRICT, Policy.FAIL)


# --- parsing -----------------------------------------------------------------------


def test_truncated_json_is_unparsable() -> None:
    assert rec(raw(3)[:20]).problem is Reason.UNPARSABLE


def test_missing_seq_is_invalid_and_names_the_field() -> None:
    record = rec(
        json.dumps(
            {"session_id": "s1", "sensor_id": "a", "kind": "end", "event_time": "x"}
        ).encode()
    )
    assert record.problem is Reason.INVALID and "seq" in (record.detail or "")


def test_seq_as_string_is_invalid() -> None:
    assert rec(raw("4")).problem is Reason.INVALID


def test_unknown_kind_is_its_own_reason() -> None:
    assert rec(raw(1, "heartbeat")).problem is Reason.UNKNOWN_KIND


def test_update_with_unknown_op_is_invalid() -> None:
    assert rec(raw(1, op="merge", row_id="r1")).problem is Reason.INVALID


def test_snapshot_rows_keep_typed_values() -> None:
    record = snapshot(0, r1=20.5, r2=21.0)
    assert record.rows == {"r1": vals(20.5), "r2": vals(21.0)}


# --- strict ------------------------------------------------------------------------


def test_snapshot_then_updates_rebuild_the_table() -> None:
    state, out = run(
        STRICT, snapshot(0, r1=1, r2=2), upsert(1, "r1", 10), upsert(2, "r3", 3), delete(3, "r2")
    )
    assert temps(state) == {"r1": 10, "r3": 3}
    assert [(c.row_id, c.op) for c in out.changes] == [
        ("r1", "snapshot"),
        ("r2", "snapshot"),
        ("r1", "update"),
        ("r3", "insert"),
        ("r2", "delete"),
    ]
    assert state.last_seq == 3 and state.status is SessionStatus.OPEN and not out.violations


def test_every_change_carries_the_lineage_of_its_record() -> None:
    first = upsert(1, "r1", 5)
    _, out = run(STRICT, snapshot(0, r1=1), first)
    assert out.changes[-1].lineage == first.lineage and out.changes[-1].seq == 1


def test_later_snapshot_replaces_the_table_and_deletes_vanished_rows() -> None:
    state, out = run(STRICT, snapshot(0, r1=1, r2=2), snapshot(1, r2=5, r9=9))
    assert temps(state) == {"r2": 5, "r9": 9}
    assert ("r1", "delete") in [(c.row_id, c.op) for c in out.changes]


def test_end_closes_the_session_and_drops_its_table_from_state() -> None:
    state, _ = run(STRICT, snapshot(0, r1=1, r2=2), end(1))
    assert state.status is SessionStatus.CLOSED
    assert state.row_ids == set() and state.table_rows == 2


def test_record_after_end_is_rejected_without_breaking() -> None:
    state, out = run(STRICT, snapshot(0, r1=1), end(1), upsert(2))
    assert [v.reason for v in out.violations] == [Reason.AFTER_END]
    assert state.status is SessionStatus.CLOSED


@pytest.mark.parametrize(
    ("records", "reason", "expected", "found"),
    [
        ([snapshot(0, r1=1), upsert(2)], Reason.GAP, 1, 2),
        ([snapshot(0, r1=1), upsert(1), upsert(1)], Reason.DUPLICATE, 2, 1),
        ([snapshot(0, r1=1), upsert(1), upsert(2), upsert(1)], Reason.OUT_OF_ORDER, 3, 1),
        ([upsert(0)], Reason.UPDATE_BEFORE_SNAPSHOT, 0, 0),
        ([snapshot(0, r1=1), delete(1, "nope")], Reason.UNKNOWN_ROW, 1, 1),
        ([snapshot(0, r1=1), rec(raw(1, "heartbeat"))], Reason.UNKNOWN_KIND, 1, None),
        ([snapshot(0, r1=1), rec(raw(1)[:25])], Reason.UNPARSABLE, 1, None),
        ([snapshot(0, r1=1), rec(raw("1"))], Reason.INVALID, 1, None),
    ],
)
def test_strict_quarantine_rejects_and_breaks_the_session(
    records: list[Record], reason: Reason, expected: int, found: int | None
) -> None:
    state, out = run(STRICT, *records)
    (violation,) = out.violations
    assert (violation.reason, violation.expected_seq, violation.found_seq) == (
        reason,
        expected,
        found,
    )
    assert violation.raw == records[-1].raw and violation.lineage == records[-1].lineage
    assert state.status is SessionStatus.BROKEN


def test_broken_session_quarantines_records_until_the_next_snapshot_resyncs_it() -> None:
    state, out = run(
        STRICT,
        snapshot(0, r1=1),
        upsert(2, "r1", 7),
        upsert(3, "r1", 8),
        snapshot(4, r5=5),
        upsert(5, "r5", 6),
    )
    assert [v.reason for v in out.violations] == [Reason.GAP, Reason.QUARANTINED]
    assert state.status is SessionStatus.OPEN and temps(state) == {"r5": 6} and state.last_seq == 5


def test_a_gap_in_strict_mode_is_counted_in_gaps_as_well_as_rejected() -> None:
    state, _ = run(STRICT, snapshot(0, r1=1), upsert(2, "r1", 7), upsert(3), snapshot(9, r1=2))
    assert (state.gaps, state.rejected, state.status) == (1, 2, SessionStatus.OPEN)


class FailsOnSeq(SessionMachine):
    """A machine with a bug that one record meets."""

    def _apply(self, state: SessionState, record: Record, out, action: str = "apply") -> str:  # type: ignore[no-untyped-def]
        if record.seq == 2:
            raise ZeroDivisionError("division by zero")
        return super()._apply(state, record, out, action)


def test_an_unexpected_error_on_one_record_is_an_internal_violation_and_the_stream_goes_on() -> (
    None
):
    state, out = run(FailsOnSeq(), snapshot(0, r1=1), upsert(1, "r1", 2), upsert(2), upsert(3))
    assert [(v.reason, v.found_seq) for v in out.violations] == [
        (Reason.INTERNAL, 2),
        (Reason.QUARANTINED, 3),
    ]
    assert "ZeroDivisionError: division by zero" in out.violations[0].detail
    assert state.status is SessionStatus.BROKEN and temps(state) == {"r1": 2}


def test_an_unexpected_error_under_the_fail_policy_stops_naming_the_record() -> None:
    bad = upsert(2)
    with pytest.raises(IntegrityError) as error:
        run(FailsOnSeq(policy=Policy.FAIL), snapshot(0, r1=1), upsert(1), bad)
    assert f"(internal) in session s1 at sensors.a/0@{bad.lineage.offset}" in str(error.value)
    assert "ZeroDivisionError" in str(error.value)


def test_quarantined_update_changes_nothing() -> None:
    state, out = run(STRICT, snapshot(0, r1=1), upsert(2, "r1", 7), upsert(3, "r1", 8))
    assert temps(state) == {"r1": 1} and len(out.changes) == 1


def test_fail_policy_raises_one_line_naming_session_lineage_and_seqs() -> None:
    gap = upsert(5)
    with pytest.raises(IntegrityError) as error:
        run(STRICT_FAIL, snapshot(0, r1=1), gap)
    message = str(error.value)
    assert "\n" not in message
    assert f"session s1 at sensors.a/0@{gap.lineage.offset}" in message
    assert "expected seq 1, found 5" in message and "(gap)" in message


def test_updates_split_across_micro_batches_continue_from_saved_state() -> None:
    state, _ = run(STRICT, snapshot(0, r1=1), upsert(1, "r1", 2))
    restored = restore(state)
    _, restored_out = run(STRICT, upsert(2, "r2", 3), state=restored)
    assert temps(restored) == {"r1": 2, "r2": 3} and not restored_out.violations


def test_state_round_trips_through_json_with_buffers() -> None:
    machine = SessionMachine(Mode.WINDOW, window=5)
    state, _ = run(machine, snapshot(0, r1=1), upsert(2), upsert(3))
    restored = SessionState.from_json(state.to_json())
    assert restored == state


def test_expire_marks_the_session_expired() -> None:
    state, _ = run(STRICT, snapshot(0, r1=1))
    out = Output()
    STRICT.expire(state, out)
    assert state.status is SessionStatus.EXPIRED and not out.violations


# --- ordered -----------------------------------------------------------------------

ORDERED = SessionMachine(Mode.ORDERED)


def test_ordered_drops_stale_and_duplicates_and_counts_them() -> None:
    state, out = run(
        ORDERED, snapshot(0, r1=1), upsert(1, "r1", 2), upsert(1, "r1", 9), upsert(0, "r1", 9)
    )
    assert [v.reason for v in out.violations] == [Reason.DUPLICATE, Reason.OUT_OF_ORDER]
    assert temps(state) == {"r1": 2} and state.rejected == 2 and state.status is SessionStatus.OPEN


def test_ordered_accepts_gaps_and_counts_them() -> None:
    state, out = run(ORDERED, snapshot(0, r1=1), upsert(4, "r1", 4), upsert(5, "r1", 5))
    assert temps(state) == {"r1": 5} and state.gaps == 1 and not out.violations


def test_ordered_mode_does_not_break_a_session_on_an_invalid_record() -> None:
    state, out = run(ORDERED, snapshot(0, r1=1), rec(raw("1")), upsert(2, "r1", 3))
    assert [v.reason for v in out.violations] == [Reason.INVALID]
    assert state.status is SessionStatus.OPEN and temps(state) == {"r1": 3}


# --- window ------------------------------------------------------------------------


def test_window_applies_out_of_order_records_in_seq_order() -> None:
    machine = SessionMachine(Mode.WINDOW, window=3)
    state, out = run(
        machine, snapshot(0, r1=1), upsert(2, "r1", 2), upsert(1, "r1", 1), upsert(3, "r1", 3)
    )
    assert [c.seq for c in out.changes] == [0, 1, 2, 3]
    assert temps(state) == {"r1": 3} and not out.violations and not state.pending


def test_window_buffers_across_micro_batches() -> None:
    machine = SessionMachine(Mode.WINDOW, window=3)
    state, _ = run(machine, snapshot(0, r1=1), upsert(2, "r1", 2))
    restored = restore(state)
    _, out = run(machine, upsert(1, "r1", 1), state=restored)
    assert [c.seq for c in out.changes] == [1, 2] and temps(restored) == {"r1": 2}


def test_window_declares_a_gap_when_the_bound_is_exceeded() -> None:
    machine = SessionMachine(Mode.WINDOW, window=2)
    state, out = run(
        machine, snapshot(0, r1=1), upsert(2, "r1", 2), upsert(3, "r1", 3), upsert(4, "r1", 4)
    )
    (gap,) = out.violations
    assert (gap.reason, gap.expected_seq, gap.found_seq) == (Reason.GAP, 1, 2)
    assert temps(state) == {"r1": 4} and state.last_seq == 4


def test_window_records_still_waiting_when_the_session_expires_are_violations() -> None:
    machine = SessionMachine(Mode.WINDOW, window=5)
    waiting = [upsert(3), upsert(2)]
    state, _ = run(machine, snapshot(0, r1=1), *waiting)
    out = Output()

    machine.expire(state, out)

    assert [(v.reason, v.found_seq, v.lineage) for v in out.violations] == [
        (Reason.GAP, 2, waiting[1].lineage),
        (Reason.GAP, 3, waiting[0].lineage),
    ]
    assert out.violations[0].detail == "waiting for seq 1 when the session expired"
    assert out.violations[0].raw == waiting[1].raw
    assert state.status is SessionStatus.EXPIRED and not state.pending and state.rejected == 2


def test_window_records_waiting_beyond_the_sessions_end_are_violations() -> None:
    machine = SessionMachine(Mode.WINDOW, window=5)
    state, out = run(machine, snapshot(0, r1=1), upsert(3), end(1))

    ((reason, seq, detail),) = [(v.reason, v.found_seq, v.detail) for v in out.violations]
    assert (reason, seq) == (Reason.AFTER_END, 3)
    assert detail == "waiting for seq 2 when the session ended at seq 1"
    assert state.status is SessionStatus.CLOSED and not state.pending


def test_window_rejects_a_record_later_than_the_bound() -> None:
    machine = SessionMachine(Mode.WINDOW, window=1)
    _, out = run(machine, snapshot(0, r1=1), upsert(2), upsert(3), upsert(1))
    assert [v.reason for v in out.violations] == [Reason.GAP, Reason.OUT_OF_ORDER]


# --- once and none -----------------------------------------------------------------


def test_once_remembers_what_it_applied_as_ranges_and_still_drops_duplicates() -> None:
    machine = SessionMachine(Mode.ONCE)
    updates = [upsert(seq, "r1", seq) for seq in (*range(1, 1001), 1005, 1003, 1004)]
    state, _ = run(machine, snapshot(0, r1=1), *updates)
    restored = restore(state)

    assert json.loads(restored.to_json())["seen"] == [[0, 1000], [1003, 1005]]
    _, out = run(machine, upsert(500), upsert(1004), upsert(1002), upsert(1001), state=restored)
    assert [v.found_seq for v in out.violations] == [500, 1004]
    assert json.loads(restored.to_json())["seen"] == [[0, 1005]]


def test_once_reads_the_seqs_an_older_state_listed_one_by_one() -> None:
    state, _ = run(SessionMachine(Mode.ONCE), snapshot(0, r1=1), upsert(1), upsert(3))
    old = json.loads(state.to_json())
    old["seen"] = [0, 1, 3]  # as state version 4 wrote it before ranges

    restored = SessionState.from_json(json.dumps(old))

    _, out = run(SessionMachine(Mode.ONCE), upsert(3), upsert(2), state=restored)
    assert [v.found_seq for v in out.violations] == [3]
    assert json.loads(restored.to_json())["seen"] == [[0, 3]]


def test_once_drops_duplicates_whatever_the_order() -> None:
    machine = SessionMachine(Mode.ONCE)
    state, out = run(
        machine, snapshot(0, r1=1), upsert(2, "r1", 2), upsert(1, "r1", 1), upsert(2, "r1", 9)
    )
    assert [v.reason for v in out.violations] == [Reason.DUPLICATE]
    assert temps(state) == {"r1": 1}


def test_none_applies_everything_as_it_comes() -> None:
    machine = SessionMachine(Mode.NONE)
    state, out = run(
        machine, snapshot(0, r1=1), upsert(5, "r1", 5), upsert(5, "r1", 6), upsert(2, "r1", 2)
    )
    assert temps(state) == {"r1": 2} and not out.violations and state.last_seq == 5


@pytest.mark.parametrize("mode", [m for m in Mode if m is not Mode.STRICT])
def test_lenient_modes_never_fail_the_query(mode: Mode) -> None:
    machine = SessionMachine(mode, Policy.FAIL, window=1)
    state, out = run(
        machine, snapshot(0, r1=1), upsert(3), upsert(3), upsert(1), rec(raw("7")), upsert(9)
    )
    assert state.status is SessionStatus.OPEN and out.violations


# --- trace -------------------------------------------------------------------------


def test_trace_records_each_transition_with_before_and_after() -> None:
    machine = SessionMachine(Mode.STRICT, trace=True)
    gap = upsert(3)
    _, out = run(machine, snapshot(0, r1=1), gap)
    assert [t.action for t in out.transitions] == ["apply", "reject:gap:broken"]
    last = out.transitions[-1]
    assert last.before["status"] == "open" and last.after["status"] == "broken"
    assert last.lineage == gap.lineage and last.seq == 3


def test_a_checkpoint_of_another_state_layout_is_refused_naming_the_shadow_way() -> None:
    from silver.reconstruct import layout_refusal

    assert layout_refusal(None, 5, "file:///c") is None  # a checkpoint from before the note
    assert layout_refusal("5", 5, "file:///c") is None
    refused = layout_refusal("5", 6, "file:///c")
    assert refused is not None and "layout version 5" in refused and "version 6" in refused
    assert "`lakehouse shadow start silver`" in refused and "`shadow swap`" in refused
