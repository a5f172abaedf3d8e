"""Faults injected at the producer show up as quarantined rows and failed expectations,
in the results table, in `lakehouse check`/`report`, and in the Data Docs site."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bronze import sensor_records
from lakehouse import quality
from lakehouse.checks import build_data_docs, check_tables
from lakehouse.producer import TrafficSpec, produce
from lakehouse.settings import Settings
from silver import reconstruct
from tests.support import overrides, run_lakehouse, settings_for

pytestmark = pytest.mark.integration

FAULTS = {"null_key": 2, "oversize": 1, "duplicate": 2, "gap": 1, "malformed_json": 1}
SPEC = TrafficSpec(seed=23, sensors=3, sessions_per_sensor=3, rows_per_snapshot=20,
                   updates_per_session=40, partitions=2, faults=FAULTS)  # fmt: skip


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


def failed_in(spark: SparkSession, settings: Settings, mode: str) -> dict[tuple[str, str], int]:
    """(table, expectation) -> unexpected rows (quarantined rows in streams), failures only."""
    results = spark.read.format("delta").load(quality.results_uri(settings.storage.root))
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
    quarantined = quality.quarantined_rows(
        spark, settings.storage.root, sensor_records.NAME, sensor_records.COLUMNS
    )

    counts = quarantined.groupBy("expectation").count().collect()
    by_expectation = {r.expectation: r["count"] for r in counts}
    assert by_expectation == {"key_present": FAULTS["null_key"],
                              "value_within_size_bound": FAULTS["oversize"]}  # fmt: skip
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
        "bronze.sensor_records", "silver.row_changes", "silver.session_rows",
        "silver.sessions", "silver.violations",
    }  # fmt: skip
    assert not any(c.blocking for c in checks), lines
    # One fault per session, and each makes its session reject at least one record: above
    # the bound of 1 in 1,000 (a null key or an oversize value through the gap it leaves).
    faulty_sessions = sum(FAULTS.values())
    assert failed_in(spark, settings, "check") == {
        ("silver.sessions", "violation_rate_below_bound"): faulty_sessions
    }
    assert any("FAILED violation_rate_below_bound (warn)" in line for line in lines)


def test_report_prints_the_summary_and_builds_data_docs_with_every_suite(
    faulty_lake: tuple[Path, Settings], kafka_bootstrap: str
) -> None:
    root, settings = faulty_lake
    env = overrides(root, kafka_bootstrap, "dq.sensors.")

    checked = run_lakehouse("check", "silver", env=env)
    report = run_lakehouse("report", env=env)

    assert checked.returncode == 0, checked.stderr
    assert "5 tables checked" not in checked.stdout and "4 tables checked" in checked.stdout
    assert report.returncode == 0, report.stderr
    assert "WARN silver.sessions" in report.stdout
    assert "PASS bronze.sensor_records" in report.stdout
    assert "[warn] silver.sessions.violation_rate_below_bound" in report.stdout
    index = build_data_docs(settings)
    assert f"Data Docs: {index}" in report.stdout
    html = index.read_text()
    for table in ("bronze.sensor_records", "silver.row_changes", "silver.sessions"):
        assert table in html
