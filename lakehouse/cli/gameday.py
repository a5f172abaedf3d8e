"""`lakehouse gameday`: faults and load against the target, each step with a verdict."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from lakehouse.core.console import echo


def add_commands(commands: Any) -> None:
    command = commands.add_parser(
        "gameday",
        help="strike faults and load at the target in a namespace of its own; a verdict a step",
        description="Run a game day against the target (--target): in a namespace of its own "
        "(topics under a prefix, on a broker of its own when the target's is the embedded one; "
        "its own lake root, checkpoints and catalog; its own `run all --continuous`), send "
        "traffic whose answers are known, strike each fault of the scenario at its moment, let "
        "the pipeline recover, and reconcile Kafka with bronze, bronze with silver (the "
        "reference session machine) and silver with gold (gold computed again). One line a "
        "step; exit 0 only if no step failed. The report: JSON beside the namespaces "
        "(<local_state>/gameday/) and a page of the report site. The deployment's tables, "
        "topics and jobs are never touched.",
    )
    # Also after the command, as the issue's and the docs' examples write it; given only
    # when given, so that `lakehouse --target X gameday` keeps X.
    command.add_argument(
        "--target", default=argparse.SUPPRESS, help="settings target (as before the command)"
    )
    command.add_argument(
        "--scenario", type=Path, help="scenario YAML (default: conf/gameday/default.yaml)"
    )
    command.add_argument("--rate", type=float, help="the load phase's rate, records/s")
    command.add_argument("--multiply", type=float, help="the load phase's multiple of the rate")
    command.add_argument("--keep", action="store_true", help="keep the namespace afterwards")
    command.add_argument("--json", action="store_true", help="print the report as JSON")
    command.set_defaults(handler=run_gameday)


def run_gameday(args: argparse.Namespace) -> int:
    from lakehouse.gameday.run import gameday
    from lakehouse.gameday.scenario import DEFAULT, load_scenario

    scenario = load_scenario(args.scenario or DEFAULT)
    report, written = gameday(args.target, scenario, args.keep, args.rate, args.multiply)
    if args.json:
        print(json.dumps(report.as_json(), indent=2, default=str))
    passed = sum(v.outcome == "PASS" for v in report.verdicts)
    failed = [v.step for v in report.verdicts if v.outcome == "FAIL"]
    echo(
        f"game day {'passed' if report.passed else 'FAILED'}: {passed} passed, "
        f"{len(failed)} failed{': ' + ', '.join(failed) if failed else ''}, "
        f"{sum(v.outcome == 'SKIP' for v in report.verdicts)} skipped in "
        f"{report.seconds:.0f} s; report {written}"
    )
    return 0 if report.passed else 1
