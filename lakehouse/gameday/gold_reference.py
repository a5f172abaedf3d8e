"""Gold computed again from silver with pandas, the plain way: what each gold model must
hold, for game day's silver ↔ gold verdict and for the tests."""

from __future__ import annotations

from typing import Any

import pandas as pd

METRICS = ("temperature", "humidity", "pressure")


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
    named = silver_violations.dropna(subset=["session_id"])
    rejected = named.groupby(["sensor_id", "session_id"]).size()
    return {
        (r.sensor_id, r.session_id): {
            "status": r.status,
            "records": r.records,
            "updates": r.updates,
            "final_rows": r.table_rows,
            "violations": rejected.get((r.sensor_id, r.session_id), 0),
            "duration_seconds": (r.last_event_time - r.first_event_time).total_seconds(),
            "first_offset": r.first_offset,
            "last_offset": r.offset,
            "last_partition": r.partition,
        }
        for r in silver_sessions.itertuples()
    }


def _metrics(group: pd.DataFrame) -> dict[str, Any]:
    return {
        f"{m}_{stat}": getattr(group[m], fn)()
        for m in METRICS
        for stat, fn in (("min", "min"), ("mean", "mean"), ("max", "max"), ("readings", "count"))
    }
