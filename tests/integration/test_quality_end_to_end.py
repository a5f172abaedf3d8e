"""Faults injected at the producer show up as quarantined rows and failed expectations,
in the results table, in `lakehouse check`/`report`, and in the Data Docs site."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bronze import sensor_records
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings
from lakehouse.ops.producer import TrafficSpec, produce
from lakehouse.quality import store
from lakehouse.quality.checks import Checker, TableCheck
from lakehouse.quality.suites import load_suites
from lakehouse.report.checks import build_data_docs
from lakehouse.services.s3 import EmbeddedS3
from silver import reconstruct
from tests.support import overrides, run_lakehouse, settings_for
from tests.support.browser import render

pytestmark = pytest.mark.integration

FAULTS = {"null_key": 2, "oversize": 1, "duplicate": 2, "gap": 1, "malformed_json": 1}
PUBLIC_READ = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": "*",
                "Action": ["s3:GetObject"],
                "Resource": ["arn:aws:s3:::reports/*"],
            }
        ],
    }
)
# A row of the Data Docs index's validation table, once its scripts have built it.
VALIDATION_ROW = re.compile(
    r"<tr[^>]*>\s*<td[^>]*>(.*?)</td>.*?<a[^>]*>\s*([a-z]+\.[a-z_]+)\s*</a>\s*</td>\s*</tr>", re.S
)
SPEC = TrafficSpec(
    seed=23,
    sensors=3,
    sessions_per_sensor=3,
    rows_per_snapshot=20,
    updates_per_session=40,
    partitions=2,
    faults=FAULTS,
)


@pytest.fixture(scope="module")
def faulty_lake(
    spark: SparkSession, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Settings]:
    """Faulty traffic through bronze and silver (validated in-stream), then checked."""
    root = tmp_path_factory.mktemp("quality-e2e")
    prefix = "dq.sensors."
    produce(replace(SPEC, topic_prefix=prefix), kafka_bootstrap)
    settings = settings_for(root, kafka_bootstrap, prefix)
    sensor_records.run(spark, settings)
    reconstruct.run(spark, settings)
    return root, settings


def check_tables(
    spark: SparkSession,
    settings: Settings,
    select: str | None = None,
    since: str | None = None,
    echo: Callable[[str], None] = print,
) -> list[TableCheck]:
    """What `lakehouse check` does with its selection: every table that exists, validated."""
    suites = load_suites(settings.quality.suites_dir, select)
    checker = Checker(spark, settings, suites)
    found = [checker.check(s.table, since, echo) for s in suites]
    return [c for c in found if c is not None]


def failed_in(spark: SparkSession, settings: Settings, mode: str) -> dict[tuple[str, str], int]:
    """(table, expectation) -> unexpected rows (quarantined rows in streams), failures only."""
    results = store.read_results(spark, settings.storage)
    assert results is not None
    count = "quarantined" if mode == "stream" else "unexpected_count"
    rows = (
        results.where((F.col("mode") == mode) & ~F.col("success"))
        .groupBy("table_name", "expectation")
        .agg(F.sum(F.coalesce(count, F.lit(0))).alias("n"))
        .collect()
    )
    return {(r.table_name, r.expectation): r.n for r in rows}


def test_bronze_quarantines_exactly_the_records_the_protocol_forbids(
    spark: SparkSession, faulty_lake: tuple[Path, Settings]
) -> None:
    _, settings = faulty_lake
    quarantined = store.quarantined_rows(
        spark, settings.storage, sensor_records.NAME, sensor_records.TABLE.columns
    )

    counts = quarantined.groupBy("expectation").count().collect()
    by_expectation = {r.expectation: r["count"] for r in counts}
    assert by_expectation == {
        "key_present": FAULTS["null_key"],
        "value_within_size_bound": FAULTS["oversize"],
    }
    assert failed_in(spark, settings, "stream") == {
        ("bronze.sensor_records", "key_present"): FAULTS["null_key"],
        ("bronze.sensor_records", "value_within_size_bound"): FAULTS["oversize"],
        # a warning: recorded, nothing quarantined
        ("silver.sessions", "violation_rate_below_bound"): 0,
    }


def test_check_fails_the_violation_rate_for_every_faulty_session_and_nothing_else(
    spark: SparkSession, faulty_lake: tuple[Path, Settings]
) -> None:
    _, settings = faulty_lake
    lines: list[str] = []

    checks = check_tables(spark, settings, echo=lines.append)

    assert {c.suite.table for c in checks} == {
        "bronze.sensor_records",
        "silver.row_changes",
        "silver.session_rows",
        "silver.sessions",
        "silver.violations",
    }
    assert not any(c.blocking for c in checks), lines
    # One fault per session, and each makes its session reject at least one record: above
    # the bound of 1 in 1,000 (a null key or an oversize value through the gap it leaves).
    faulty_sessions = sum(FAULTS.values())
    assert failed_in(spark, settings, "check") == {
        ("silver.sessions", "violation_rate_below_bound"): faulty_sessions
    }
    assert any("FAILED violation_rate_below_bound (warn)" in line for line in lines)


def test_report_publishes_data_docs_that_render_every_suite_with_its_state_in_a_browser(
    faulty_lake: tuple[Path, Settings], kafka_bootstrap: str, tmp_path: Path
) -> None:
    root, settings = faulty_lake
    env = overrides(root, kafka_bootstrap, "dq.sensors.")
    server = EmbeddedS3.under(
        settings.storage.local_state_dir, settings.s3.access_key, settings.s3.secret_key
    )
    endpoint = server.start(buckets=("reports",))
    try:
        checked = run_lakehouse("check", env=env)
        report = run_lakehouse("report", "--publish", "s3://reports/data-docs", env=env)
        # Served as a static website is: anonymous reads of the bucket.
        server.client(endpoint).put_bucket_policy(Bucket="reports", Policy=PUBLIC_READ)
        screenshot = tmp_path / "data-docs.png"
        dom = render(f"{endpoint}/reports/data-docs/index.html", screenshot)
    finally:
        server.stop()

    assert checked.returncode == 0, checked.stderr
    assert "5 tables checked: 4 passed, 1 with warnings, 0 failed" in checked.stdout
    assert report.returncode == 0, report.stderr
    for line in (
        "PASS bronze.sensor_records",
        "PASS silver.row_changes",
        "WARN silver.sessions",
        "[warn] silver.sessions.violation_rate_below_bound",
        "published",
        "s3://reports/data-docs/index.html",
    ):
        assert line in report.stdout
    assert f"Data Docs: {build_data_docs(settings)}" in report.stdout
    # The index the browser built from the published site: one row per suite, its state.
    rows: dict[str, str] = {}
    for icons, suite in VALIDATION_ROW.findall(dom):
        rows.setdefault(suite, icons)  # newest first
    assert set(rows) == {
        "bronze.sensor_records",
        "silver.row_changes",
        "silver.session_rows",
        "silver.sessions",
        "silver.violations",
    }
    assert "ge-failed-icon" in rows["silver.sessions"]
    assert all("ge-success-icon" in rows[s] for s in rows if s != "silver.sessions")
    assert screenshot.stat().st_size > 10_000 and screenshot.read_bytes()[:4] == b"\x89PNG"


def test_a_failing_fail_expectation_stops_the_stream_and_the_rerun_after_a_fix_loses_nothing(
    spark: SparkSession, kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = "dqfail.sensors."
    sent = produce(replace(SPEC, sensors=1, faults={}, topic_prefix=prefix), kafka_bootstrap)
    suites = tmp_path / "suites"
    suite = suites / "bronze" / "sensor_records.json"
    suite.parent.mkdir(parents=True)
    entry = {
        "name": "at_most_ten",
        "severity": "fail",
        "type": "expect_table_row_count_to_be_between",
        "kwargs": {"min_value": 0, "max_value": 10},
    }
    suite.write_text(
        json.dumps(
            {"table": "bronze.sensor_records", "row_key": ["topic"], "expectations": [entry]}
        )
    )
    settings = settings_for(tmp_path, kafka_bootstrap, prefix, quality__suites=str(suites))
    table = settings.storage.table_uri("bronze.sensor_records")

    with pytest.raises(LakehouseError) as stopped:
        sensor_records.run(spark, settings)

    assert "\n" not in str(stopped.value)
    assert (
        "bronze.sensor_records batch 0: expectation at_most_ten (fail) failed: observed "
        f"{sent.records}; the batch was not committed" in str(stopped.value)
    )
    assert spark.read.format("delta").load(table).count() == 0
    failed = failed_in(spark, settings, "stream")
    assert failed == {("bronze.sensor_records", "at_most_ten"): 0}

    suite.write_text(suite.read_text().replace('"fail"', '"warn"'))  # the fix: a warning
    sensor_records.run(spark, settings)

    assert spark.read.format("delta").load(table).count() == sent.records


def test_check_since_validates_only_the_window_of_each_table(
    spark: SparkSession, faulty_lake: tuple[Path, Settings]
) -> None:
    _, settings = faulty_lake
    lines: list[str] = []

    (later,) = check_tables(spark, settings, "bronze", since="2999-01-01", echo=lines.append)

    assert later.rows == 0 and not later.failed
    assert "since 2999-01-01 by ingested_at" in lines[0]
