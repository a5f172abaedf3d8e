"""`lakehouse gameday`: a namespace opened on the target, the scenario's steps and load
phase against its own pipeline, one report; the namespace removed unless kept."""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from contextlib import suppress
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lakehouse.core.console import echo
from lakehouse.gameday import load
from lakehouse.gameday.day import Day, Verdict, run_step
from lakehouse.gameday.pipeline import Namespace, open_namespace
from lakehouse.gameday.scenario import Load, Scenario
from lakehouse.report.gameday_page import write_gameday_page
from lakehouse.runtime.spark import build_spark


@dataclass
class Report:
    target: str | None
    scenario: str
    day_id: str
    started_at: str
    verdicts: list[Verdict] = field(default_factory=list)
    load: list[load.LoadRun] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        """No step failed; the load phase reports, it does not judge."""
        return all(v.outcome != "FAIL" for v in self.verdicts)

    def highest_rate_kept_up(self) -> float | None:
        return max((r.rate for r in self.load if r.kept_up is True), default=None)

    def as_json(self) -> dict[str, Any]:
        return {
            **{k: v for k, v in asdict(self).items() if k not in ("verdicts", "load")},
            "passed": self.passed,
            "verdicts": [
                {**asdict(v), "line": v.line(), "tallies": [asdict(t) for t in v.tallies]}
                for v in self.verdicts
            ],
            "load": [r.as_json() for r in self.load],
            "highest_rate_kept_up": self.highest_rate_kept_up(),
        }


def gameday(
    target: str | None, scenario: Scenario, keep: bool = False, rate: float | None = None,
    multiply: float | None = None,
) -> tuple[Report, Path]:  # fmt: skip
    """Run `scenario` on `target` in a namespace of its own: the report and its JSON's path."""
    day_id = f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    named = target or os.environ.get("LAKEHOUSE_TARGET", "local")
    if scenario.load is not None and (rate or multiply):
        scenario = replace(scenario, load=_load(scenario.load, rate, multiply))
    began = time.monotonic()
    report = Report(named, scenario.name, day_id, datetime.now(UTC).isoformat(timespec="seconds"))
    space = open_namespace(target, day_id)
    root = space.settings.storage.root
    echo(f"game day {day_id} on {named}: topics {space.prefix}*, lake {root}")
    ended = False
    try:
        run_in(space, scenario, report)
        ended = True
    finally:
        if space.broker is not None:
            space.broker.stop()
        if space.gate is not None:
            space.gate.close()
        report.seconds = time.monotonic() - began
        written = write_report(report, space)
        if not ended:  # Ctrl-C or a failure of game day itself: what it did is still kept
            echo(f"game day cut short after {len(report.verdicts)} steps; report {written}")
        if not keep:
            remove(space)
    return report, written


def run_in(space: Namespace, scenario: Scenario, report: Report) -> None:
    """The scenario's steps and load phase against the namespace's own pipeline, each
    verdict into `report` as it comes: a day cut short still reports the steps it ran."""
    spark = build_spark(space.verifier(), app_name="lakehouse-gameday")
    # The verdicts count what is readable: a data file gone is its records lost, not a crash.
    spark.conf.set("spark.sql.files.ignoreMissingFiles", "true")
    day = Day(space, spark, scenario)
    try:
        day.pipeline.start()
        for number, step in enumerate(scenario.steps, 1):
            echo(f"[{number}/{len(scenario.steps)}] {step.name} ...")
            report.verdicts.append(run_step(day, step, number))
            echo(report.verdicts[-1].line())
        if scenario.load is not None:
            load_phase(day, scenario.load, report.load)
    finally:
        day.pipeline.stop()


def load_phase(day: Day, plan: Load, runs: list[load.LoadRun]) -> None:
    for n, rate in enumerate((plan.rate, plan.rate * plan.multiply)):
        echo(f"load at {rate:,.0f} records/s for {plan.seconds:.0f} s ...")
        group = day.pipeline.job.pid if day.pipeline.job is not None else None
        run = load.run_at(
            day.spark, day.space.settings, rate, plan.seconds, 900 + n, day.recover, group
        )
        echo("  " + load_line(run))
        runs.append(run)


def load_line(run: load.LoadRun) -> str:
    if run.lag_growth is None:
        seen = f"{len(run.floors)} of bronze's commits seen, {load.MIN_FLOORS} needed"
        text = (
            f"{run.rate:,.0f}/s: too short to tell whether it kept up ({seen}: longer load.seconds)"
        )
    else:
        verdict = "kept up" if run.kept_up else "fell behind"
        text = f"{run.rate:,.0f}/s: {verdict} (lag's floor rose {run.lag_growth:,.0f} records/s)"
    if run.to_silver is not None and run.to_gold is not None:
        text += (
            f"; Kafka → silver p50 {run.to_silver.p50_s:.1f} s p95 {run.to_silver.p95_s:.1f} s;"
            f" → gold p50 {run.to_gold.p50_s:.1f} s p95 {run.to_gold.p95_s:.1f} s"
        )
    if run.batch_ms:
        text += "; batches " + ", ".join(f"{k} {ms / 1000:.1f} s" for k, ms in run.batch_ms.items())
    if run.state_rows is not None:
        text += f"; silver state {run.state_rows:,} rows {(run.state_memory_bytes or 0) >> 20} MiB"
    if run.memory_bytes:
        text += f"; pipeline {run.memory_bytes >> 20:,} MiB resident"
    return text


def _load(plan: Load, rate: float | None, multiply: float | None) -> Load:
    return Load(rate or plan.rate, multiply or plan.multiply, plan.seconds)


def write_report(report: Report, space: Namespace) -> Path:
    """`gameday/<day>.json` beside the namespaces, and its page in the report site."""
    folder = space.folder.parent
    folder.mkdir(parents=True, exist_ok=True)
    document = report.as_json()
    path = folder / f"{report.day_id}.json"
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")
    write_gameday_page(space.deployed.quality.site_dir, document)
    return path


def remove(space: Namespace) -> None:
    """The namespace's topics, lake and folders, and its broker."""
    from confluent_kafka.admin import AdminClient

    if space.broker is None:
        admin = AdminClient({"bootstrap.servers": space.bootstrap})
        topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith(space.prefix)]
        for future in admin.delete_topics(topics).values() if topics else []:
            future.result(30)
    root = space.settings.storage.root
    if space.on_s3:
        from lakehouse.services import s3
        from lakehouse.storage.buckets import bucket_and_prefix

        client, (bucket, prefix) = s3.client(space.settings), bucket_and_prefix(root)
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=bucket, Delete={"Objects": keys})
    else:
        shutil.rmtree(space.local(root), ignore_errors=True)
        with suppress(OSError):  # the last namespace of the lake: no `_gameday` left behind
            space.local(root).parent.rmdir()
    shutil.rmtree(space.folder, ignore_errors=True)
