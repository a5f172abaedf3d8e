"""Protocol records of one session, made as silver's state machine reads them."""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import strategies as st

from silver.session_state import Lineage, Record, parse_record

_offsets = itertools.count()


def vals(t: float) -> dict[str, Any]:
    return {"temperature": t, "humidity": 50.0, "pressure": 1000.0, "status": "ok", "counter": 1}


def raw(seq: Any, kind: str = "update", **payload: Any) -> bytes:
    body = {
        "session_id": "s1",
        "sensor_id": "a",
        "seq": seq,
        "kind": kind,
        "event_time": f"2026-01-01T00:00:{int(seq) % 60:02d}.000Z",
        **payload,
    }
    return json.dumps(body).encode()


def rec(value: bytes) -> Record:
    return parse_record("s1", value, Lineage("sensors.a", 0, next(_offsets)))


def snapshot(seq: int, **rows: float) -> Record:
    return rec(
        raw(seq, "snapshot", rows=[{"row_id": r, "values": vals(t)} for r, t in rows.items()])
    )


def upsert(seq: int, row: str = "r1", t: float = 1.0) -> Record:
    return rec(raw(seq, op="upsert", row={"row_id": row, "values": vals(t)}))


def delete(seq: int, row: str) -> Record:
    return rec(raw(seq, op="delete", row_id=row))


def end(seq: int) -> Record:
    return rec(raw(seq, "end"))


@st.composite
def sessions(draw: st.DrawFn) -> list[Record]:
    """A session's records: mostly in order, with gaps, repeats, bad bytes and ends."""
    records, seq, live = [], 0, set()
    for _ in range(draw(st.integers(1, 25))):
        step = draw(st.sampled_from(["upsert"] * 6 + ["delete", "snapshot", "gap", "bad", "end"]))
        row = draw(st.sampled_from(["r1", "r2", "r3"]))
        if step == "snapshot":
            picked = draw(st.sets(st.sampled_from(["r1", "r2", "r3", "r4"])))
            records.append(snapshot(seq, **{r: float(seq) for r in sorted(picked)}))
            live = set(picked)
        elif step == "upsert":
            records.append(upsert(seq, row, float(seq)))
            live.add(row)
        elif step == "delete":
            records.append(delete(seq, row))
            live.discard(row)
        elif step == "gap":
            seq += draw(st.integers(-2, 3))
            records.append(upsert(max(seq, 0), row, float(seq)))
        elif step == "bad":
            records.append(rec(raw(seq)[:20]))
        else:
            records.append(end(seq))
        seq += 1
    return records
