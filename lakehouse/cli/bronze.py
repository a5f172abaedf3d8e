"""`lakehouse bronze accept-loss|retire-topic|accept-recreated|changes`: the operator's
ways on when Kafka changed under bronze, each recorded in bronze.kafka_changes."""

from __future__ import annotations

import argparse
from typing import Any

from lakehouse.cli.context import spark_for
from lakehouse.core.console import echo

AFTER = (
    "Run while bronze is stopped: refused while it runs (its leases on S3, its lock files "
    "on local disk). The change is "
    "recorded in bronze.kafka_changes with who accepted it and when, then made a batch of "
    "the bronze stream that reads nothing: every row bronze holds stays, once. "
    "`lakehouse status` lists the changes accepted."
)


ACTIONS = (
    (
        "accept-loss",
        "offsets_lost",
        ("TOPIC", "PARTITION"),
        "go on from Kafka's earliest offset of a partition whose unread records are gone",
        "Kafka no longer holds offsets of TOPIC's PARTITION that bronze has not read "
        "(retention, delete_records): skip them, from where bronze stands to Kafka's earliest "
        "offset, and go on from there. Refused if nothing is lost.",
    ),
    (
        "retire-topic",
        "topic_retired",
        ("TOPIC",),
        "stop reading a topic that was deleted (its sensor decommissioned)",
        "TOPIC is gone from Kafka: bronze reads it no more, whatever it held that bronze had "
        "not read, and the other topics go on. Refused while Kafka still has the topic. A "
        "retired topic that comes back is refused until accept-recreated.",
    ),
    (
        "accept-recreated",
        "topic_recreated",
        ("TOPIC",),
        "read a topic deleted and made again under its name as its next incarnation",
        "TOPIC was deleted and made again (its offsets start again below where bronze "
        "stands, or it was retired): read it from its earliest offsets as incarnation N, its "
        "rows' topic written as TOPIC~N so that their (topic, partition, offset) never meets "
        "the old incarnation's; silver credits them to the same sensor. What bronze had not "
        "read of the old incarnation is skipped.",
    ),
)
"""Each way on: command, the change it accepts, its arguments, help and description."""
_TYPES = {"PARTITION": int}


def add_commands(commands: Any) -> None:
    command = commands.add_parser(
        "bronze",
        help="accept a change in Kafka that stopped bronze: offsets lost, a topic gone, a "
        "topic re-created (changes: list those accepted)",
        description="Bronze stops, never skips, when Kafka changes under it; each way on is "
        "a command naming what it accepts. " + AFTER,
    )
    actions = command.add_subparsers(title="actions", metavar="ACTION", required=True)

    for name, change, arguments, text, description in ACTIONS:
        action = actions.add_parser(name, help=text, description=f"{description} {AFTER}")
        for argument in arguments:
            action.add_argument(argument.lower(), metavar=argument, type=_TYPES.get(argument))
        action.add_argument("--reason", help="why, kept with the change")
        action.set_defaults(handler=run_accept, change=change)

    changes = actions.add_parser(
        "changes",
        help="list the changes accepted",
        description="Every change in Kafka accepted, from bronze.kafka_changes.",
    )
    changes.set_defaults(handler=run_changes)


def run_accept(args: argparse.Namespace) -> None:
    from lakehouse.ops.changes import accept

    settings, spark = spark_for(args, "bronze-accept")
    partition = getattr(args, "partition", None)
    for line in accept(spark, settings, args.change, args.topic, partition, args.reason):
        echo(line)


def run_changes(args: argparse.Namespace) -> None:
    from lakehouse.ops.changes import accepted

    settings, spark = spark_for(args, "bronze-changes")
    for line in accepted(spark, settings):
        echo(line)
