"""Silver's session machine in the JVM (`jvm/src/lakehouse/silver/SessionMachine.java`)
against its specification, the Python machine: the same records, modes, policies, bounds
and expiries give the same outputs and the same state, and the same one line under the
`fail` policy."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from py4j.java_gateway import get_field
from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from silver.session_machine import Clock, SessionMachine
from silver.session_state import (
    IntegrityError,
    Lineage,
    Mode,
    Output,
    Policy,
    Record,
    SessionState,
)
from tests.support.records import raw, rec, sessions

pytestmark = pytest.mark.integration


class JvmMachine:
    """The Java machine and its state, driven record by record through the gateway."""

    def __init__(self, spark: SparkSession, machine: SessionMachine, timeout_ms: int) -> None:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        self.jvm, self.java = jvm, getattr(jvm, "lakehouse.silver.SessionMachine")
        inner = getattr(jvm, "lakehouse.silver.SessionMachine$Mode")
        policy = getattr(jvm, "lakehouse.silver.SessionMachine$Policy")
        self.machine = self.java(
            inner.valueOf(machine.mode.name), policy.valueOf(machine.policy.name),
            machine.window, machine.trace, machine.max_rows,
        )  # fmt: skip
        self.clock = getattr(jvm, "lakehouse.silver.SessionMachine$Clock")(timeout_ms)
        self.state = getattr(jvm, "lakehouse.silver.SessionMachine$SessionState")("s1", None)

    def record(self, r: Record) -> Any:
        lineage = getattr(self.jvm, "lakehouse.silver.SessionMachine$Lineage")(
            r.lineage.topic, r.lineage.partition, r.lineage.offset
        )
        rows = None
        if r.rows is not None:
            rows = self.jvm.java.util.LinkedHashMap()
            for row_id, values in r.rows.items():
                rows.put(row_id, values)
        return getattr(self.jvm, "lakehouse.silver.SessionMachine$Record")(
            lineage, r.raw, r.session_id, r.sensor_id, r.seq, r.kind, r.event_time, r.op,
            r.row_id, r.values, rows, r.problem and str(r.problem), r.detail,
        )  # fmt: skip

    def process(self, records: list[Record]) -> Any:
        listed = self.jvm.java.util.ArrayList()
        for r in records:
            listed.add(self.record(r))
        return self.machine.process(self.state, listed)

    def advance(self, now: int) -> tuple[Any, bool]:
        out = getattr(self.jvm, "lakehouse.silver.SessionMachine$Output")()
        return out, self.clock.advance(self.machine, self.state, now, out)


def lineage(at: Any) -> tuple[Any, ...] | None:
    if at is None:
        return None
    if isinstance(at, Lineage):
        return (at.topic, at.partition, at.offset)
    return (at.topic(), at.partition(), at.offset())


def plain(value: Any) -> Any:
    return None if value is None else {k: value[k] for k in value}


def python_output(out: Output) -> list[tuple[Any, ...]]:
    return [
        *(("change", c.session_id, c.sensor_id, c.row_id, c.op, c.values, c.seq, c.event_time,
           lineage(c.lineage)) for c in out.changes),
        *(("violation", v.session_id, v.sensor_id, str(v.reason), v.detail, v.expected_seq,
           v.found_seq, lineage(v.lineage), v.raw) for v in out.violations),
        *(("transition", t.session_id, t.sensor_id, t.action, t.before, t.after, t.seq,
           lineage(t.lineage)) for t in out.transitions),
    ]  # fmt: skip


def java_output(out: Any) -> list[tuple[Any, ...]]:
    def raw_of(v: Any) -> bytes | None:
        found = v.raw()
        return None if found is None else bytes(found)

    return [
        *(("change", c.sessionId(), c.sensorId(), c.rowId(), c.op(), plain(c.values()), c.seq(),
           c.eventTime(), lineage(c.lineage())) for c in get_field(out, "changes")),
        *(("violation", v.sessionId(), v.sensorId(), v.reason(), v.detail(), v.expectedSeq(),
           v.foundSeq(), lineage(v.lineage()), raw_of(v)) for v in get_field(out, "violations")),
        *(("transition", t.sessionId(), t.sensorId(), t.action(), plain(t.before()),
           plain(t.after()), t.seq(), lineage(t.lineage())) for t in get_field(out, "transitions")),
    ]  # fmt: skip


def python_state(s: SessionState) -> dict[str, Any]:
    return {
        "status": str(s.status), "last_seq": s.last_seq, "first_seq": s.first_seq,
        "has_snapshot": s.has_snapshot, "row_ids": set(s.row_ids), "records": s.records,
        "snapshots": s.snapshots, "updates": s.updates, "rejected": s.rejected, "gaps": s.gaps,
        "broken_at_seq": s.broken_at_seq, "first_event_time": s.first_event_time,
        "last_event_time": s.last_event_time, "first_lineage": lineage(s.first_lineage),
        "last_lineage": lineage(s.last_lineage), "rows_at_end": s.rows_at_end,
        "table_rows": s.table_rows, "pending": sorted(s.pending), "seen": s.seen.ranges,
    }  # fmt: skip


def java_state(s: Any) -> dict[str, Any]:
    def get(name: str) -> Any:
        return get_field(s, name)

    ranges = get_field(get("seen"), "ranges")
    return {
        "status": get("status").toString(), "last_seq": get("lastSeq"),
        "first_seq": get("firstSeq"), "has_snapshot": get("hasSnapshot"),
        "row_ids": set(get("rowIds")), "records": get("records"),
        "snapshots": get("snapshots"), "updates": get("updates"), "rejected": get("rejected"),
        "gaps": get("gaps"), "broken_at_seq": get("brokenAtSeq"),
        "first_event_time": get("firstEventTime"), "last_event_time": get("lastEventTime"),
        "first_lineage": lineage(get("firstLineage")), "last_lineage": lineage(get("lastLineage")),
        "rows_at_end": get("rowsAtEnd"), "table_rows": s.tableRows(),
        "pending": list(get("pending").keySet()),
        "seen": [[e.getKey(), e.getValue()] for e in ranges.entrySet()],
    }  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(
    records=sessions(),
    mode=st.sampled_from(list(Mode)),
    policy=st.sampled_from(list(Policy)),
    trace=st.booleans(),
    max_rows=st.sampled_from([2, 3, 1_000_000]),
    cuts=st.lists(st.integers(0, 25), max_size=3),
    oddities=st.lists(st.sampled_from(["unknown kind", "invalid seq"]), max_size=2),
)
def test_the_jvm_machine_gives_what_the_python_machine_gives(
    spark: SparkSession,
    records: list[Record],
    mode: Mode,
    policy: Policy,
    trace: bool,
    max_rows: int,
    cuts: list[int],
    oddities: list[str],
) -> None:
    extra = {"unknown kind": rec(raw(3, "restart")), "invalid seq": rec(raw("3"))}
    records = [*records, *(extra[o] for o in oddities)]
    machine = SessionMachine(mode, policy, window=3, trace=trace, max_rows=max_rows)
    clock = Clock(timeout_ms=60_000)
    java = JvmMachine(spark, machine, clock.timeout_ms)
    state = SessionState("s1")
    bounds = sorted({0, *cuts, len(records)})
    for low, high in itertools.pairwise(bounds):
        part = records[low:high]
        try:
            out = python_output(machine.process(state, part))
        except IntegrityError as error:
            with pytest.raises(Py4JJavaError) as found:
                java.process(part)
            assert str(error) in str(found.value.java_exception.getMessage())
            return
        assert java_output(java.process(part)) == out
        assert java_state(java.state) == python_state(state)
        # the data's clock moves past the timeout between parts: both expire alike
        state.last_time = max(state.last_time or 0, high * 1000)
        java.state.heardAt(high * 1000)
        now = high * 1000 + clock.timeout_ms + 1
        expired = Output()
        kept = clock.advance(machine, state, now, expired)
        java_expired, java_kept = java.advance(now)
        assert (java_output(java_expired), java_kept) == (python_output(expired), kept)
        if not kept:
            return
