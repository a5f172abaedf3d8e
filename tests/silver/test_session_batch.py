"""A session's rows of a micro-batch -> outputs: the in-order fast path against the state
machine, and the output frame. No Spark: rows are made as `silver.parsing` makes them."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from silver import session_batch
from silver.outputs import OTHER, OTHERS
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
)
from tests.support.records import delete, raw, rec, sessions, snapshot, upsert, vals

STRICT = SessionMachine(Mode.STRICT, Policy.QUARANTINE)
CLOCK = Clock(timeout_ms=60_000)
COLUMNS = [
    *("session_id", "topic", "partition", "offset", "kafka_time", "pos", "plain", "sensor_id"),
    *("seq", "kind"),
    *("event_time", "op", "row_id", *(f.name for f in VALUES)),
    *(f"{name}_null" for name in INTEGER_VALUES),
    *("key", "value"),
]


def rows_of(records: list[Record], plain: bool = True) -> pd.DataFrame:
    """The rows `silver.parsing` makes of these records: typed where `plain` (and the
    protocol accepts them), raw bytes otherwise."""
    rows = []
    for record in records:
        lineage = {
            "session_id": record.session_id,
            **record.lineage.columns(),
            "kafka_time": record.lineage.offset,  # a millisecond per offset
            "pos": 0,
        }
        if not plain or record.problem:
            # as the JVM leaves them: envelope and integers 0, the bytes kept
            unread = {"seq": 0, "event_time": 0, "key": None, "value": record.raw}
            for name in INTEGER_VALUES:
                unread[name], unread[f"{name}_null"] = 0, True
            rows.append({**lineage, "plain": False, **unread})
            continue
        typed = {
            **lineage,
            "plain": True,
            "sensor_id": record.sensor_id,
            "seq": record.seq,
            "kind": record.kind,
            "event_time": record.event_time,
            "op": record.op,
        }
        items = list((record.rows or {}).items()) if record.kind == "snapshot" else []
        if record.kind == "update":
            items = [(record.row_id, record.values)]
        for pos, (row_id, values) in enumerate(items or [(None, None)]):
            row = {**typed, "pos": pos, "row_id": row_id}
            for f in VALUES:
                value = (values or {}).get(f.name)
                if f.name in INTEGER_VALUES:
                    row[f.name], row[f"{f.name}_null"] = value or 0, value is None
                else:
                    row[f.name] = value
            rows.append(row)
    frame = (
        pd.DataFrame(rows, columns=COLUMNS)
        .astype(dict.fromkeys(("seq", "event_time", "kafka_time", *INTEGER_VALUES), "int64"))
        .sort_values(["partition", "offset", "pos"], ignore_index=True)
    )
    # Arrow hands a null text over as None, never as NaN: a column that pandas made float
    # because it holds only nulls (an unparsable record and a snapshot of no rows) too.
    for column in ("sensor_id", "kind", "op", "row_id", "key", "value"):
        frame[column] = frame[column].astype(object).where(frame[column].notna(), None)
    return frame


def processed(*args: Any) -> pd.DataFrame:
    """`session_batch.process`'s frames as one, expanded, the session's row last."""
    return expanded([*session_batch.process(*args), session_batch.to_frame(Output(), args[1])])


def expanded(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Frames as one, with the columns that travel as JSON in `other` as columns of their
    own, integers kept exact as Spark reads them."""
    frame = pd.concat(frames, ignore_index=True)
    found = [json.loads(text) if isinstance(text, str) else {} for text in frame[OTHER]]
    others = {
        name: pd.array([f.get(name) for f in found], dtype="Int64" if "INT" in kind else "object")
        for name, kind in OTHERS.items()
    }
    return pd.concat([frame.drop(columns=[OTHER]), pd.DataFrame(others)], axis=1)


def outputs(frame: pd.DataFrame) -> list[tuple[Any, ...]]:
    """The frame's rows in a stable order, bytes aside (plain records carry none)."""
    frame = frame.drop(columns=["raw_value"]).astype(object).where(frame.notna(), None)
    return sorted(map(tuple, frame.itertuples(index=False)), key=repr)


def test_an_in_order_batch_changes_the_rows_it_carries_column_wise() -> None:
    state = SessionState("s1")
    records = [snapshot(0, r1=1, r2=2), upsert(1, "r3", 3), upsert(2, "r1", 4), delete(3, "r2")]
    frame = processed(STRICT, state, rows_of(records), "a")

    changes = frame[frame["output"] == "silver.row_changes"]
    assert list(zip(changes["row_id"], changes["op"], strict=True)) == [
        ("r1", "snapshot"), ("r2", "snapshot"), ("r3", "insert"), ("r1", "update"),
        ("r2", "delete"),
    ]  # fmt: skip
    assert changes["latest"].tolist() == [False, False, True, True, True]
    assert changes["temperature"].tolist()[:4] == [1, 2, 3, 4] and changes["counter"].isna().iloc[4]
    assert state.row_ids == {"r1", "r3"} and state.last_seq == 3 and state.updates == 3


def test_the_first_record_out_of_sequence_hands_the_rest_to_the_state_machine() -> None:
    state = SessionState("s1")
    records = [snapshot(0, r1=1), upsert(1, "r1", 2), upsert(3, "r1", 9), snapshot(4, r1=5)]
    frame = processed(STRICT, state, rows_of(records), "a")

    rejected = frame[frame["output"] == "silver.violations"]
    assert rejected["reason"].tolist() == ["gap"] and rejected["raw_value"].isna().all()
    assert state.status == "open" and state.last_seq == 4 and state.rejected == 1


def test_records_of_two_incarnations_of_a_topic_keep_each_its_own_lineage() -> None:
    # The topic made again restarts at the offsets the old one used (bronze/kafka_changes.py).
    old = snapshot(0, r1=1)
    again = replace(upsert(1, "r1", 2), lineage=Lineage("sensors.a~2", 0, old.lineage.offset))
    frame = processed(STRICT, SessionState("s1"), rows_of([old, again]), "a")

    changes = frame[frame["output"] == "silver.row_changes"]
    assert list(zip(changes["topic"], changes["offset"], changes["op"], strict=True)) == [
        ("sensors.a", old.lineage.offset, "snapshot"),
        ("sensors.a~2", old.lineage.offset, "update"),
    ]


@settings(max_examples=150, deadline=None)
@given(
    records=sessions(),
    mode=st.sampled_from([Mode.STRICT, Mode.ORDERED, Mode.WINDOW, Mode.ONCE]),
    cut=st.integers(0, 25),
    max_rows=st.sampled_from([2, 3, 1_000_000]),
)
def test_the_fast_path_gives_what_the_state_machine_gives_record_by_record(
    records: list[Record], mode: Mode, cut: int, max_rows: int
) -> None:
    machine = SessionMachine(mode, Policy.QUARANTINE, window=3, max_rows=max_rows)
    fast, slow = SessionState("s1"), SessionState("s1")
    for part in (records[:cut], records[cut:]):
        if not part:
            continue
        typed = processed(machine, fast, rows_of(part), "a")
        parsed = processed(machine, slow, rows_of(part, plain=False), "a")
        assert outputs(typed) == outputs(parsed)
        fast, slow = (SessionState.from_json(s.to_json()) for s in (fast, slow))
    # a record read in the JVM waits in the window without its bytes (bronze has them)
    unread = {seq: replace(r, raw=None) for seq, r in slow.pending.items()}
    assert fast == replace(slow, pending=unread)


def test_the_output_frame_keeps_integers_at_the_edges_of_bigint_exactly() -> None:
    values = {**vals(1.0), "counter": 2**63 - 1}
    rows = [{"row_id": "r1", "values": values}, {"row_id": "r2", "values": {"counter": None}}]
    first = rec(raw(0, "snapshot", rows=rows))
    for plain in (True, False):
        state = SessionState("s1")
        frame = processed(STRICT, state, rows_of([first, upsert(2**63 - 2)], plain), "a")

        assert str(frame["counter"].dtype) == "Int64"
        assert frame["counter"].iloc[0] == 2**63 - 1 and frame["counter"].isna().iloc[1]
        assert frame["found_seq"].tolist()[2] == 2**63 - 2


def test_ordinal_numbers_the_rows_each_record_produced_however_records_are_batched() -> None:
    records = [snapshot(0, r1=1, r2=2, r3=3), upsert(1, "r2", 5), snapshot(2, r1=1, r4=4)]

    def changes(frame):  # type: ignore[no-untyped-def]
        rows = frame[frame["output"] == "silver.row_changes"]
        return list(zip(rows["offset"], rows["row_id"], rows["op"], rows["ordinal"], strict=True))

    whole = processed(STRICT, SessionState("s1"), rows_of(records), "a")
    state = SessionState("s1")
    split = [
        processed(STRICT, state, rows_of(records[:2]), "a"),
        processed(STRICT, state, rows_of(records[2:], plain=False), "a"),
    ]
    assert changes(whole) == changes(split[0]) + changes(split[1])
    assert [ordinal for *_, ordinal in changes(whole)] == [0, 1, 2, 0, 0, 1, 2, 3]


class EmitsAnUntypedValue(SessionMachine):
    """A machine with a bug past its per-record guard: a value its table cannot hold."""

    def process(self, state: SessionState, records):  # type: ignore[no-untyped-def]
        out = super().process(state, records)
        out.changes.append(replace(out.changes[0], values={"counter": "many"}))
        return out


def test_an_error_typing_a_sessions_output_makes_its_records_internal_violations() -> None:
    records = [snapshot(0, r1=1), upsert(1, "r1", 2)]
    rows = rows_of(records, plain=False)
    frames, _, keep = session_batch.judge(
        EmitsAnUntypedValue(), SessionState("s1"), rows, "a", CLOCK
    )
    frame = expanded(frames)

    assert not keep
    assert frame["reason"].tolist() == ["internal", "internal"]
    assert frame["offset"].tolist() == [r.lineage.offset for r in records]
    assert "handling the session's batch failed" in frame["detail"][0]


class RejectsWithAnUntypedSeq(SessionMachine):
    """A bug past the per-record guard in a column that travels as JSON (`other`)."""

    def process(self, state: SessionState, records):  # type: ignore[no-untyped-def]
        out = super().process(state, records)
        first = records[0]
        out.violations.append(
            Violation("s1", "a", Reason.GAP, "", "many", None, first.lineage, None)  # type: ignore[arg-type]
        )
        return out


def test_a_value_carried_as_json_is_typed_in_the_state_function_as_well() -> None:
    records = [snapshot(0, r1=1), upsert(1, "r1", 2)]
    frames, _, keep = session_batch.judge(
        RejectsWithAnUntypedSeq(), SessionState("s1"), rows_of(records, plain=False), "a", CLOCK
    )
    frame = expanded(frames)

    assert not keep
    assert frame["reason"].tolist() == ["internal", "internal"]


def test_under_the_fail_policy_such_an_error_stops_naming_the_session() -> None:
    rows = rows_of([snapshot(0, r1=1)], plain=False)
    with pytest.raises(IntegrityError, match="session s1: handling the session's batch failed"):
        session_batch.judge(
            EmitsAnUntypedValue(policy=Policy.FAIL), SessionState("s1"), rows, "a", CLOCK
        )


def test_a_session_lives_in_its_own_time_however_its_records_are_batched() -> None:
    # 0 s and 10 s; 100 s, past the 60 s timeout: the session had expired (rejected);
    # 300 s, past the tombstone's second timeout: a new session of the same id.
    records = [snapshot(0, r1=1), upsert(1, "r2", 2), upsert(2, "r1", 3), snapshot(0, r1=5)]
    seconds = dict(zip((r.lineage.offset for r in records), (0, 10, 100, 300), strict=True))
    rows = rows_of(records)
    rows["kafka_time"] = [1_700_000_000_000 + seconds[o] * 1000 for o in rows["offset"]]

    def judged(cuts: list[int]) -> tuple[SessionState, pd.DataFrame]:
        state, frames = SessionState("s1", "a"), []
        for a, b in zip([0, *cuts], [*cuts, len(rows)], strict=True):
            found, state, _ = session_batch.judge(STRICT, state, rows.iloc[a:b], "a", CLOCK)
            frames += found
        return state, expanded(frames)

    state, whole = judged([])
    split_state, split = judged([1, 2, 3])

    # the same outputs (`latest` marks a row's last change within each batch, by design)
    assert outputs(whole.drop(columns="latest")) == outputs(split.drop(columns="latest"))
    assert split_state == state
    rejected = whole[whole["output"] == "silver.violations"]
    assert rejected["reason"].tolist() == ["after_end"]
    assert rejected["detail"].tolist() == ["session already expired"]
    assert (state.status, state.records, state.row_ids) == (Status.OPEN, 1, {"r1"})
    # r1 changed in both lives of the session: the table takes the second's only
    changes = whole[whole["output"] == "silver.row_changes"]
    assert changes[changes["latest"].astype(bool)]["row_id"].tolist().count("r1") == 1


def test_a_record_without_a_kafka_timestamp_moves_no_clock() -> None:
    records = [snapshot(0, r1=1), upsert(1, "r1", 2), upsert(2, "r1", 3)]
    rows = rows_of(records)
    rows["kafka_time"] = [0, 1_700_000_000_000, 1_700_000_001_000]

    frames, state, _ = session_batch.judge(STRICT, SessionState("s1", "a"), rows, "a", CLOCK)

    assert (state.status, state.last_seq, state.last_time) == (Status.OPEN, 2, 1_700_000_001_000)
    assert not (expanded(frames)["output"] == "silver.violations").any()
