"""`lakehouse explain`: one session, or the session of one Kafka record, from Kafka to gold."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from lakehouse.cli.context import spark_for
from lakehouse.core.console import echo
from lakehouse.core.errors import LakehouseError


def add_commands(commands: Any) -> None:
    command = commands.add_parser(
        "explain",
        help="one session's path from Kafka through bronze and silver to gold",
        description="Explain sessions (SENSOR/SESSION ...), or the session of one Kafka "
        "record (--topic, --partition, --offset): its records in Kafka and whether bronze "
        "holds each exactly once (the broker is read over the session's offsets); silver's "
        "status, state transitions (where silver ran with --trace), violations with their "
        "records, and its rows now with the record each came from; every gold row the "
        "session feeds, with the run that last wrote it and that run's gate results. Each "
        "session also gets a page in the report site (explain/, linked from the tables "
        "page). Reads "
        "by the session's key and Kafka coordinates only. Exits 1 if the session is unknown, "
        "or if bronze does not hold its records exactly once.",
    )
    command.add_argument("sessions", nargs="*", metavar="SENSOR/SESSION")
    command.add_argument("--topic", help="with --partition and --offset: a record's session")
    command.add_argument("--partition", type=int)
    command.add_argument("--offset", type=int)
    command.add_argument("--rows", action="store_true", help="list the session's rows now")
    command.add_argument(
        "--json", action="store_true", help="print the explanations as one JSON list"
    )
    command.set_defaults(handler=run_explain)


def run_explain(args: argparse.Namespace) -> int:
    from lakehouse.cli.explain_text import text
    from lakehouse.ops import explain
    from lakehouse.report.explain_page import write_explain_page

    record = (args.topic, args.partition, args.offset)
    if bool(args.sessions) == any(v is not None for v in record):
        raise LakehouseError("name sessions (SENSOR/SESSION) or a record (--topic ...): one")
    if not args.sessions and None in record:
        raise LakehouseError("a record needs --topic, --partition and --offset")
    for named in args.sessions:
        if "/" not in named:
            raise LakehouseError(f"{named!r}: expected SENSOR/SESSION, e.g. sensor-001/abc")
    settings, spark = spark_for(args, "explain", explain.SHORT_RUN)
    sessions = [tuple(s.split("/", 1)) for s in args.sessions]
    if not sessions:
        sensor, session = explain.session_of_record(spark, settings, *record)
        echo(
            f"{args.topic}/{args.partition}@{args.offset} is a record of {sensor}/{session}",
            err=True,
        )
        sessions = [(sensor, session)]
    found = []
    for sensor, session in sessions:
        began = time.monotonic()
        found.append(explain.explain_session(spark, settings, sensor, session, args.rows))
        echo(f"explained {sensor}/{session} in {time.monotonic() - began:.1f}s", err=True)
    pages = [write_explain_page(settings.quality.site_dir, e.to_dict()) for e in found]
    if args.json:
        print(json.dumps([e.to_dict() for e in found], indent=2, default=str))
    else:
        for e, page in zip(found, pages, strict=True):
            for line in text(e):
                echo(line)
            echo(f"page: {page}")
    return 0 if all(k.exactly_once for e in found for k in e.kafka) else 1
