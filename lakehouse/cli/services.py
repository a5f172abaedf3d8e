"""`lakehouse kafka|catalog|s3 start|stop|status`: the embedded services, one handler."""

from __future__ import annotations

import argparse
from typing import Any

from lakehouse.cli.context import settings_of, spark_for
from lakehouse.core.console import echo
from lakehouse.services import embedded

HELP = {
    "kafka": "the embedded Kafka broker (KRaft) on 127.0.0.1",
    "catalog": "the embedded metastore on 127.0.0.1 that names every table (bronze.*, gold.*)",
    "s3": "the embedded S3 server (SeaweedFS) on 127.0.0.1, for the lake, reports and tests",
    "cluster": "the embedded Spark standalone cluster (a master and workers) on 127.0.0.1",
}


def add_commands(commands: Any) -> None:
    for name, text in HELP.items():
        command = commands.add_parser(name, help=text, description=text)
        actions = ("start", "stop", "status") + (("register",) if name == "catalog" else ())
        command.add_argument("action", choices=actions)
        command.set_defaults(handler=run_service, service=name)
    catalog = commands.choices["catalog"]
    catalog.description = (
        "start|stop|status: the embedded metastore (a Derby network server) that every job, "
        "`lakehouse sql` and the SQL server share. register: name every Delta table under "
        "the storage root in the catalog (jobs register their own tables)."
    )
    commands.choices["s3"].add_argument(
        "--bucket", action="append", default=[], help="start: create this bucket (repeatable)"
    )


def run_service(args: argparse.Namespace) -> int:
    """Start, stop or report one embedded service; status exits 3 when it is not running."""
    if args.action == "register":
        return register_lake(args)
    service = embedded(settings_of(args))[args.service]
    if args.action == "start":
        buckets = getattr(args, "bucket", [])
        started = service.start(tuple(buckets)) if buckets else service.start()  # type: ignore[call-arg]
        echo(f"{service.title} ready at {started} (log: {service.log_file})")
    elif args.action == "stop":
        stopped = service.stop()
        echo(f"{service.title} stopped" if stopped else f"{service.title} was not running")
    else:
        address = service.address()
        echo(f"running at {address}" if address else "not running")
        return 0 if address else 3
    return 0


def register_lake(args: argparse.Namespace) -> int:
    from lakehouse.storage.catalog import register_lake

    settings, spark = spark_for(args, "catalog")
    names = register_lake(spark, settings.storage)
    echo(f"{len(names)} tables registered: {', '.join(names) or 'none yet'}")
    return 0
