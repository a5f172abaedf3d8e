"""Silver's tables in the reference's shape and compared with it, and a small traffic for it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from lakehouse.gameday import lake, reconcile, reference
from lakehouse.ops.producer import TrafficSpec

silver_tables = lake.silver_found


def assert_matches(found: reference.Expected, expected: reference.Expected) -> None:
    """Silver equal to the reference, judged as game day judges it."""
    tally = reconcile.silver_vs_reference(found, expected)
    assert tally.ok, "\n".join([tally.line(), *_unlike(found, expected)])


def _unlike(found: reference.Expected, expected: reference.Expected) -> list[str]:
    """A few rows of each table whose values differ, found against expected."""
    lines = []
    for table, pairs in expected.tables().items():
        want = dict(pairs)
        unlike = [(k, v) for k, v in found.tables()[table] if k in want and want[k] != v]
        lines += [f"{table} {k}: {v} != {want[k]}" for k, v in unlike[:3]]
    return lines


def only(found: reference.Expected, sessions: set[tuple[str, str | None]]) -> reference.Expected:
    """The part of silver's tables that belongs to the given sessions."""
    return reference.Expected(
        rows=[(k, v) for k, v in found.rows if k[0] in sessions],
        sessions=[(k, v) for k, v in found.sessions if k in sessions],
        violations=[(k, v) for k, v in found.violations if k[0] in sessions],
        changes=[(k, v) for k, v in found.changes if k[0] in sessions],
    )


SMALL_SPEC = TrafficSpec(
    sensors=2, sessions_per_sensor=3, rows_per_snapshot=6, updates_per_session=15, resync_every=6
)


def small_spec(seed: int, faults: dict[str, int], **fields: Any) -> TrafficSpec:
    return replace(SMALL_SPEC, seed=seed, faults=faults, **fields)
