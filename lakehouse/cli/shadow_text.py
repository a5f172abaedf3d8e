"""What `lakehouse shadow status` and `compare` print: plain lines, from their results."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from lakehouse.ops.shadow import Side, Where
from lakehouse.ops.shadow_compare import Comparison, TableDiff


def where_lines(found: Where) -> Iterator[str]:
    now, live, other = found.versions, found.live, found.shadow
    what = "being built beside" if now.state == "shadow" else "kept (retired by a swap) beside"
    yield f"{now.other} ({', '.join(now.parts)}) is {what} the live {live.tag}"
    if "silver" in now.parts:
        yield (
            f"  silver: bronze read to version {_read(live)} live, {_read(other)} in "
            f"{other.tag} (bronze is at {found.bronze_version}); between them "
            f"{found.records_behind:,} records, {found.seconds_behind:,.0f}s"
        )
    for model in sorted(other.gold_behind):
        yield f"  {model}: {_behind(live, model)} live, {_behind(other, model)} in {other.tag}"
    yield from _check_lines(live, other)
    why = found.same_input
    yield "  same input on both: yes" if why is None else f"  same input on both: no: {why}"


def _check_lines(*sides: Side) -> Iterator[str]:
    for side in sides:
        failed = sum(side.checks_failed.values())
        named = ", ".join(f"{t} {n}" for t, n in sorted(side.checks_failed.items()))
        yield (
            f"  checks {side.tag}: {failed:,} of {side.checks_run:,} validations failed"
            + (f" ({named})" if named else "")
        )


def _read(side: Side) -> str:
    return "none yet" if side.silver_read is None else str(side.silver_read - 1)


def _behind(side: Side, model: str) -> str:
    n = side.gold_behind.get(model, -1)
    return "never ran" if n < 0 else "up to date" if n == 0 else f"{n} input versions behind"


def comparison_lines(found: Comparison) -> Iterator[str]:
    live, other = found.where.live.tag, found.where.shadow.tag
    yield f"live {live} against {other}, both at bronze version {_read(found.where.live)}:"
    for diff in found.tables:
        yield from _table_lines(diff, live, other)
    yield from _check_lines(found.where.live, found.where.shadow)
    yield (
        f"{'equal' if found.equal else 'they differ'}: "
        f"{sum(not t.equal for t in found.tables)} of {len(found.tables)} tables differ"
    )


def _table_lines(diff: TableDiff, live: str, other: str) -> Iterator[str]:
    counts = diff.counts
    head = (
        f"  {diff.table}: {diff.rows['live']:,} rows in {live}, {diff.rows['shadow']:,} in {other}"
    )
    if diff.equal:
        yield f"{head}: equal"
        return
    columns = ", ".join(f"{c} {n:,}" for c, n in diff.columns_changed.items())
    yield (
        f"{head}: {counts['only_live']:,} only in {live}, {counts['only_shadow']:,} only in "
        f"{other}, {counts['changed']:,} changed" + (f" ({columns})" if columns else "")
    )
    for side, columns_only in diff.columns_only.items():
        if columns_only:
            yield f"    columns only in {side}: {', '.join(columns_only)}"
    for kind, rows in diff.samples.items():
        for row in rows:
            yield f"    {kind}: {_key(row)}{_changes(row)}"


def _key(row: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in row["key"].items())


def _changes(row: dict[str, Any]) -> str:
    return "".join(f"; {c}: {a} -> {b}" for c, (a, b) in row["columns"].items())
