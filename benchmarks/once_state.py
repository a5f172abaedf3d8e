"""The state of one `once`-mode session after 1,000,000 updates: the seqs it applied, kept
as ranges, against the baseline of every seq listed one by one (as state version 4 kept
them before), in one process.

A `once` session must remember what it applied to drop a duplicate whatever the order;
a sensor sends in order with a few records late, so ranges stay few. The traffic: seqs in
order, every 1,000th one held back and sent 50 later (out of order, never lost), and a
duplicate of every 10,000th. Prints the state's JSON size both ways, their ratio, and the
time the session machine takes per update.

    python -m benchmarks.once_state                  # 1,000,000 updates
    python -m benchmarks.once_state --updates 100000
"""

from __future__ import annotations

import argparse
import json
import time

from silver.session_machine import SessionMachine
from silver.session_state import Lineage, Mode, Record, SessionState


def traffic(updates: int) -> list[int]:
    """Seqs as sent: 0 (the snapshot), then 1..updates with every 1,000th late by 50 and
    every 10,000th sent twice."""
    late: dict[int, int] = {}
    sent = [0]
    for seq in range(1, updates + 1):
        if seq % 1000 == 0:
            late[seq + 50] = seq
            continue
        sent.append(seq)
        if seq % 10_000 == 1:
            sent.append(seq)
        if seq in late:
            sent.append(late.pop(seq))
    return sent + sorted(late.values())


def record(seq: int) -> Record:
    kind = "snapshot" if seq == 0 else "update"
    rows = {"r0": {"temperature": 1.0}} if seq == 0 else None
    values = None if seq == 0 else {"temperature": float(seq)}
    row_id = None if seq == 0 else "r0"
    op = None if seq == 0 else "upsert"
    return Record(Lineage("sensors.a", 0, seq), None, "s", "a", seq, kind, None, op, row_id,
                  values, rows)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=1_000_000)
    args = parser.parse_args()
    sent = traffic(args.updates)
    machine, state = SessionMachine(Mode.ONCE), SessionState("s", "a")
    began = time.perf_counter()
    out = machine.process(state, (record(seq) for seq in sent))
    took = time.perf_counter() - began

    ranges = len(state.to_json().encode())
    body = json.loads(state.to_json())
    body["seen"] = [seq for low, high in body["seen"] for seq in range(low, high + 1)]
    listed = len(json.dumps(body, separators=(",", ":")).encode())
    print(f"once-mode session: {len(sent):,} records sent, {len(out.violations):,} duplicates")
    print(f"  state as ranges:            {ranges:>12,} bytes ({len(state.seen.ranges)} ranges)")
    print(f"  state listing every seq:    {listed:>12,} bytes (baseline)")
    print(f"  ratio baseline / ranges:    {listed / ranges:>12,.0f}x")
    print(f"  session machine:            {took / len(sent) * 1e6:>12.2f} us per record")


if __name__ == "__main__":
    main()
