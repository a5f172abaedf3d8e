"""Rows that every expectation of a table's suite accepts: what `test_quality.py` damages
one field at a time to see the intended expectation fail."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

Row = dict[str, Any]

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
VALUES = {"temperature": 21.5, "humidity": 40.0, "pressure": 1013.0, "status": "ok", "counter": 7}


def lineage(i: int) -> Row:
    return {"topic": "sensors.s1", "partition": 0, "offset": 100 + i}


def good_rows(table: str) -> list[Row]:
    """A few rows that every expectation of the table's suite accepts."""
    return _GOOD[table]()


def _sensor_records() -> list[Row]:
    return [
        {
            **lineage(i),
            "key": b"s1-0",
            "value": b'{"seq": %d}' % i,
            "kafka_timestamp": NOW,
            "kafka_timestamp_type": 0,
            "headers": [],
            "ingested_at": NOW,
            "batch_id": 0,
        }
        for i in range(4)
    ]


def _row_changes() -> list[Row]:
    snapshot = [
        {
            "session_id": "s1-0",
            "sensor_id": "s1",
            "row_id": f"r{r}",
            "op": "snapshot",
            **VALUES,
            "seq": 0,
            "ordinal": r,
            "event_time": NOW,
            "batch_id": 0,
            **lineage(0),
        }
        for r in range(3)
    ]
    updates = [
        {**snapshot[0], "op": "update", "seq": seq, "ordinal": 0, **lineage(seq)}
        for seq in (1, 2, 3)
    ]
    resync = {**snapshot[1], "seq": 7, **lineage(7)}  # a snapshot may follow a gap
    return [*snapshot, *updates, resync]


def _session_rows() -> list[Row]:
    return [
        {
            "session_id": "s1-0",
            "sensor_id": "s1",
            "row_id": f"r{r}",
            **VALUES,
            "seq": 3,
            "event_time": NOW,
            **lineage(3),
        }
        for r in range(3)
    ]


def _sessions() -> list[Row]:
    return [
        {
            "session_id": f"s1-{s}",
            "sensor_id": "s1",
            "status": "open",
            "first_seq": 0,
            "last_seq": 9,
            "records": 2000,
            "snapshots": 1,
            "updates": 1999,
            "rejected": 1,
            "gaps": 0,
            "table_rows": 3,
            "first_event_time": NOW,
            "last_event_time": NOW + timedelta(minutes=5),
            "first_topic": "sensors.s1",
            "first_partition": 0,
            "first_offset": 1,
            "updated_batch_id": 0,
            **lineage(s),
        }
        for s in range(3)
    ]


def _violations() -> list[Row]:
    return [
        {
            "session_id": "s1-0",
            "sensor_id": "s1",
            "reason": reason,
            "detail": "",
            "expected_seq": 4,
            "found_seq": 5,
            "raw_value": b"{}",
            "batch_id": 0,
            **lineage(i),
        }
        for i, reason in enumerate(("gap", "duplicate", "quarantined"))
    ]


_GOOD: dict[str, Callable[[], list[Row]]] = {
    "bronze.sensor_records": _sensor_records,
    "silver.row_changes": _row_changes,
    "silver.session_rows": _session_rows,
    "silver.sessions": _sessions,
    "silver.violations": _violations,
}
