"""Protocol records of one session, made as silver's state machine reads them."""

from __future__ import annotations

import itertools
import json
from typing import Any

from silver.session_machine import Lineage, Record, parse_record

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
