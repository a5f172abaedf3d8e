"""`lakehouse produce`: deterministic sensor traffic, with faults on request."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from lakehouse.cli.context import settings_of
from lakehouse.core.console import echo
from lakehouse.core.errors import LakehouseError


def add_commands(commands: Any) -> None:
    produce = commands.add_parser(
        "produce",
        help="send deterministic sensor traffic, with faults on request",
        description="Send snapshot/update/end sessions (docs/protocol.md) to one topic per "
        "sensor and print what was sent.",
    )
    produce.add_argument("--seed", type=int, default=7)
    produce.add_argument("--sensors", type=int, default=3, help="topics, one per sensor")
    produce.add_argument("--first-sensor", type=int, default=1, help="number of the first sensor")
    produce.add_argument("--sessions", type=int, default=4, help="sessions per sensor, overlapping")
    produce.add_argument("--rows", type=int, default=200, help="rows in each snapshot")
    produce.add_argument("--updates", type=int, default=100, help="updates per session")
    produce.add_argument(
        "--resync-every", type=int, default=0, help="fresh snapshot every N updates"
    )
    produce.add_argument(
        "--rate", default="max", help="records per second, or `max` (default) for no limit"
    )
    produce.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="KIND=N",
        help="inject N faults of a kind: gap, duplicate, reorder, malformed_json, "
        "missing_field, wrong_type, oversize, null_key (repeatable)",
    )
    produce.add_argument(
        "--start",
        metavar="ISO-8601",
        help="event time of the first records, UTC (default: now, to the minute, so that the "
        "data is as fresh as `lakehouse status` expects; fix it for traffic that is the "
        "same on every run)",
    )
    produce.add_argument(
        "--open",
        action="store_true",
        help="leave every session open (no `end`): it expires once silent for "
        "silver.session_timeout_seconds of Kafka time",
    )
    produce.add_argument("--json", action="store_true", help="print the report as JSON")
    produce.set_defaults(handler=run_produce)


def run_produce(args: argparse.Namespace) -> None:
    from lakehouse.ops.producer import TrafficSpec, produce
    from lakehouse.services.kafka import check_reachable, client_options, resolve_bootstrap

    settings = settings_of(args)
    faults: dict[str, int] = {}
    for item in args.fault:
        kind, _, count = item.partition("=")
        if not count.isdigit():
            raise LakehouseError(f"--fault {item!r}: expected KIND=N, e.g. gap=3")
        faults[kind] = faults.get(kind, 0) + int(count)
    start = _start_time(args.start)
    spec = TrafficSpec(
        seed=args.seed,
        sensors=args.sensors,
        first_sensor=args.first_sensor,
        sessions_per_sensor=args.sessions,
        rows_per_snapshot=args.rows,
        updates_per_session=args.updates,
        resync_every=args.resync_every,
        faults=faults,
        topic_prefix=settings.kafka.topic_prefix,
        partitions=settings.kafka.partitions,
        start_time=start,
        end_sessions=not args.open,
    )
    rate = None if args.rate == "max" else float(args.rate)
    bootstrap = resolve_bootstrap(settings)
    check_reachable(bootstrap)
    report = produce(spec, bootstrap, client_options(settings.kafka), rate, progress=not args.json)
    echo(report.to_json() if args.json else report.to_text())


def _start_time(text: str | None) -> datetime:
    if text is None:
        return datetime.now(UTC).replace(second=0, microsecond=0)
    try:
        start = datetime.fromisoformat(text)
    except ValueError:
        raise LakehouseError(f"--start {text!r}: expected an ISO 8601 time") from None
    return start.replace(tzinfo=UTC) if start.tzinfo is None else start.astimezone(UTC)
