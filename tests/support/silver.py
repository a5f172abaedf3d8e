"""Silver's tables in the reference's shape and compared with it, and a small traffic for it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pyspark.sql import SparkSession

from lakehouse.core.settings import Settings
from lakehouse.ops.producer import TrafficSpec
from tests.support import reference


def silver_tables(spark: SparkSession, s: Settings) -> reference.Expected:
    """The silver tables in the reference's shape."""

    def table(name: str):  # type: ignore[no-untyped-def]
        return spark.read.format("delta").load(s.storage.table_uri(f"silver.{name}")).collect()

    found = reference.Expected()
    for r in table("session_rows"):
        found.rows[((r.topic, r.session_id), r.row_id)] = (
            r.temperature,
            r.humidity,
            r.pressure,
            r.status,
            r.counter,
            r.seq,
            r.topic,
            r.partition,
            r.offset,
        )
    for r in table("sessions"):
        found.sessions[(r.topic, r.session_id)] = (
            r.status, r.last_seq, r.records, r.rejected, r.table_rows
        )  # fmt: skip
    for r in table("violations"):
        session = None if r.session_id is None else (r.topic, r.session_id)
        found.violations[(session, r.reason, r.offset)] += 1
    for r in table("row_changes"):
        found.changes[((r.topic, r.session_id), r.row_id, r.op, r.seq)] += 1
    return found


def assert_matches(found: reference.Expected, expected: reference.Expected) -> None:
    assert found.sessions == expected.sessions
    assert found.violations == expected.violations
    assert found.rows == expected.rows
    assert found.changes == expected.changes


def only(found: reference.Expected, sessions: set[tuple[str, str | None]]) -> reference.Expected:
    """The part of silver's tables that belongs to the given sessions."""
    return reference.Expected(
        rows={k: v for k, v in found.rows.items() if k[0] in sessions},
        sessions={k: v for k, v in found.sessions.items() if k in sessions},
        violations=type(found.violations)(
            {k: v for k, v in found.violations.items() if k[0] in sessions}
        ),
        changes=type(found.changes)({k: v for k, v in found.changes.items() if k[0] in sessions}),
    )


SMALL_SPEC = TrafficSpec(
    sensors=2, sessions_per_sensor=3, rows_per_snapshot=6, updates_per_session=15, resync_every=6
)


def small_spec(seed: int, faults: dict[str, int], **fields: Any) -> TrafficSpec:
    return replace(SMALL_SPEC, seed=seed, faults=faults, **fields)
