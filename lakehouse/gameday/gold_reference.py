"""Gold computed again from silver with pandas, the plain way: what each gold model must
hold, for game day's silver ↔ gold verdict and for the tests."""

from __future__ import annotations

from typing import Any

import pandas as pd

from lakehouse.gameday.reference import ROW_FIELDS, Expected, SessionSummary

METRICS = ("temperature", "humidity", "pressure")
FIRST, LAST = ("first_topic", "first_partition", "first_offset"), ("topic", "partition", "offset")
"""Silver's columns of a session's first and last records' lineage."""


def hourly_reference(changes: pd.DataFrame) -> dict[tuple[Any, ...], dict[str, Any]]:
    """gold.sensor_hourly computed with pandas, the plain way."""
    changes = changes[changes.sensor_id.notna() & changes.event_time.notna()].assign(
        hour=lambda c: c.event_time.dt.floor("h")
    )
    out = {}
    for (sensor, hour), group in changes.groupby(["sensor_id", "hour"]):
        updates = group[group.op != "snapshot"]
        out[(sensor, hour)] = {
            "sessions_active": group.session_id.nunique(),
            "updates": len(updates),
            "rows_changed": len(set(zip(updates.session_id, updates.row_id, strict=True))),
            "session_ids": sorted(set(group.session_id)),
            **_metrics(group),
        }
    return out


def daily_reference(changes: pd.DataFrame) -> dict[tuple[Any, ...], dict[str, Any]]:
    """gold.sensor_daily straight from the row changes (not from hourly) with pandas."""
    changes = changes[changes.sensor_id.notna() & changes.event_time.notna()].assign(
        day=lambda c: c.event_time.dt.date, hour=lambda c: c.event_time.dt.floor("h")
    )
    return {
        (sensor, day): {
            "hours_active": group.hour.nunique(),
            "sessions_active": group.session_id.nunique(),
            "updates": int((group.op != "snapshot").sum()),
            **_metrics(group),
        }
        for (sensor, day), group in changes.groupby(["sensor_id", "day"])
    }


def summary_reference(
    silver_sessions: pd.DataFrame, silver_violations: pd.DataFrame
) -> dict[tuple[Any, ...], dict[str, Any]]:
    """gold.session_summary from frames in silver's shape, with pandas."""
    named = silver_violations.dropna(subset=["session_id"])
    rejected = named.groupby(["sensor_id", "session_id"]).size()
    return {
        (r.sensor_id, r.session_id): {
            "status": r.status,
            "started_at": _plain(r.first_event_time),
            "ended_at": _plain(r.last_event_time),
            "duration_seconds": _seconds(r.first_event_time, r.last_event_time),
            "records": r.records,
            "snapshots": r.snapshots,
            "updates": r.updates,
            "final_rows": r.table_rows,
            "gaps": r.gaps,
            "violations": rejected.get((r.sensor_id, r.session_id), 0),
            "first_seq": _plain(r.first_seq),
            "last_seq": _plain(r.last_seq),
            "first_topic": r.first_topic,
            "first_partition": r.first_partition,
            "first_offset": r.first_offset,
            "last_topic": r.topic,
            "last_partition": r.partition,
            "last_offset": r.offset,
        }
        for r in silver_sessions.itertuples()
    }


def silver_frames(expected: Expected) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The reference's row changes, sessions and violations as frames in the shape of
    silver's tables, for gold's references above."""
    changes = pd.DataFrame.from_records(
        [
            (session_id, row, op, seq, *values)
            for ((_, session_id), row, op, seq), values in expected.changes
        ],
        columns=["session_id", "row_id", "op", "seq", *ROW_FIELDS, "sensor_id", "event_time",
                 "topic", "partition", "offset"],
    )  # fmt: skip
    changes["event_time"] = pd.to_datetime(changes.event_time, unit="us")
    sessions = pd.DataFrame.from_records(
        [
            {
                **s._asdict(),
                "session_id": session_id,
                "first_event_time": _time(s.first_event_time),
                "last_event_time": _time(s.last_event_time),
                **dict(zip(FIRST, s.first, strict=True)),
                **dict(zip(LAST, s.last, strict=True)),
            }
            for (_, session_id), s in expected.sessions
        ],
        columns=[*SessionSummary._fields, "session_id", *FIRST, *LAST],
    )
    sensors = {session: s.sensor_id for session, s in expected.sessions}
    violations = pd.DataFrame.from_records(
        [
            (None if session is None else sensors[session], session and session[1], reason)
            for (session, reason, *_), _ in expected.violations
        ],
        columns=["sensor_id", "session_id", "reason"],
    )
    return changes, sessions, violations


def _seconds(first: Any, last: Any) -> float | None:
    if _plain(first) is None or _plain(last) is None:
        return None
    return float((last - first).total_seconds())


def _time(micros: int | None) -> pd.Timestamp | None:
    return None if micros is None else pd.Timestamp(micros, unit="us")


def _plain(value: Any) -> Any:
    """pandas' missing values as None and its timestamps as datetimes, as Spark gives them."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    return value.to_pydatetime() if hasattr(value, "to_pydatetime") else value


def _metrics(group: pd.DataFrame) -> dict[str, Any]:
    return {
        f"{m}_{stat}": getattr(group[m], fn)()
        for m in METRICS
        for stat, fn in (("min", "min"), ("mean", "mean"), ("max", "max"), ("readings", "count"))
    }
