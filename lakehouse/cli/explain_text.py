"""What `lakehouse explain` prints: an explanation (`lakehouse.ops.explain`) as a person
reads it, without knowing the lake."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from lakehouse.core.console import moment, record_at
from lakehouse.ops.explain import LINEAGE, Explanation

SHOWN = 20
"""Violations and gold rows the console lists of a session; `--json` has them all."""


def text(explained: Explanation) -> list[str]:
    """The console's lines, layer by layer."""
    e, s = explained, explained.session_row or {}
    head = f"{e.sensor}/{e.session}: " + (
        f"{s['status']}, {s['records']:,} records, {e.rows_now:,} rows now"
        if s
        else "not in silver.sessions (only its rejected records are)"
    )
    return [head, "", *_kafka(e), "", *_silver(e), "", *_gold(e)]


def _kafka(e: Explanation) -> list[str]:
    lines = ["Kafka (what the sensor sent) and bronze (what the lake took in):"]
    for k in e.kafka:
        lines.append(
            f"  {k.topic} partition {k.partition}, offsets {k.first_offset:,}..{k.last_offset:,}: "
            f"{k.records:,} records of the session, {moment(k.first_timestamp)} .. "
            f"{moment(k.last_timestamp)}"
        )
        verdict = "exactly once" if k.exactly_once else "NOT exactly once"
        if k.in_kafka is None:  # nothing to hold bronze against: say only what it holds
            verdict = "each once at most" if k.exactly_once else "NOT once each"
        lines.append(
            f"  bronze holds them {verdict}: {k.in_bronze:,} in bronze.sensor_records, "
            f"{k.in_quarantine:,} in bronze.quarantine"
            + (f"; the broker holds {k.in_kafka:,}" if k.in_kafka is not None else "")
        )
        if k.held_twice:
            lines.append(f"  held more than once: offsets {_list(k.held_twice)}")
        if k.missing:
            lines.append(f"  in Kafka, not in bronze: offsets {_list(k.missing)}")
        if k.kafka_note:
            lines.append(f"  {k.kafka_note}")
    return lines


def _silver(e: Explanation) -> list[str]:
    s = e.session_row or {}
    lines = ["silver (the session rebuilt, record by record):"]
    if s:
        lines.append(
            f"  {s['status']}; seq {s['first_seq']}..{s['last_seq']}; {s['records']:,} records: "
            f"{s['snapshots']:,} snapshots, {s['updates']:,} updates, {s['rejected']:,} rejected, "
            f"{s['gaps']:,} gaps; {moment(s['first_event_time'])} .. {moment(s['last_event_time'])}"
        )
    if e.transitions is None:
        lines.append(
            "  state transitions: not recorded (silver ran without --trace for this session); "
            "the row changes and violations below say what each record did"
        )
    else:
        lines.append(f"  state transitions ({len(e.transitions)}):")
        lines += [
            f"    seq {t['seq']} {t['action']} ({record_at(t)}): {t['before']} -> {t['after']}"
            for t in e.transitions
        ]
    ops = ", ".join(f"{op} {n:,}" for op, n in sorted(e.changes_by_op.items()))
    lines.append(f"  row changes: {ops or 'none'}")
    lines.append(f"  violations ({len(e.violations)}):")
    lines += [f"    {v['reason']} ({record_at(v)}): {violation(v)}" for v in e.violations[:SHOWN]]
    if len(e.violations) > SHOWN:
        lines.append(f"    ... and {len(e.violations) - SHOWN:,} more (--json lists them all)")
    src = e.row_sources
    lines.append(
        f"  rows now: {e.rows_now:,}"
        + (
            f", from {src['records']:,} records (offsets {src['oldest_offset']:,}.."
            f"{src['newest_offset']:,})"
            if e.rows_now
            else ""
        )
    )
    for row in e.rows or ():
        values = {k: v for k, v in row.items() if k not in (*LINEAGE, "sensor_id", "session_id")}
        lines.append(f"    {_short(values)} <- {record_at(row)}")
    return lines


def violation(v: Mapping[str, Any]) -> str:
    """What a violation found, once: the seq it expected (where it expected one) and the seq
    the record carried, then the detail, unless the detail says just that."""
    expected, found = v["expected_seq"], v["found_seq"]
    if expected is not None:
        seqs = f"expected seq {expected}, " + (
            f"found {found}" if found is not None else "found no readable seq"
        )
    else:
        seqs = f"seq {found}" if found is not None else "no readable seq"
    detail = v["detail"] or ""
    return detail if seqs in detail else "; ".join(filter(None, (seqs, detail)))


def _gold(e: Explanation) -> list[str]:
    lines = ["gold (every row the session feeds):"]
    for g in e.gold:
        lines.append(f"  {g.model}: {len(g.rows):,} rows")
        lines += [f"    {_short({k: row[k] for k in g.key})}" for row in g.rows[:SHOWN]]
        if len(g.rows) > SHOWN:
            lines.append(f"    ... and {len(g.rows) - SHOWN:,} more (--json lists them all)")
        for run in g.runs:
            if "note" in run:
                lines.append(f"    last written: unknown ({run['note']})")
                continue
            gate = run["gate"]
            passed = sum(1 for r in gate if r["success"])
            lines.append(
                f"    last written by run {run['run_id']} ({run['mode']}, "
                f"{moment(run['started_at'])}); its gate: {passed}/{len(gate)} passed"
            )
            lines += [
                f"      FAILED {r['expectation']} ({r['severity']}): unexpected "
                f"{r['unexpected_count']}"
                for r in gate
                if not r["success"]
            ]
    return lines


def _list(offsets: Sequence[int], at_most: int = 10) -> str:
    shown = ", ".join(f"{o:,}" for o in offsets[:at_most])
    return shown + (f" and {len(offsets) - at_most:,} more" if len(offsets) > at_most else "")


def _short(value: Mapping[str, Any]) -> str:
    return ", ".join(
        f"{k}={moment(v) if isinstance(v, datetime) else v}"
        for k, v in value.items()
        if v is not None
    )
