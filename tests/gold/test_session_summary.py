"""gold.session_summary's pure functions on a few inline rows."""

from __future__ import annotations

from datetime import datetime

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from gold.session_summary import changed_sessions, of_sessions, session_summary
from silver import sessions, violations

pytestmark = pytest.mark.integration

SESSION = {"session_id": "a", "sensor_id": "s1", "status": "closed", "first_seq": 0,
           "last_seq": 9, "records": 11, "snapshots": 1, "updates": 9, "rejected": 1, "gaps": 1,
           "table_rows": 3, "first_event_time": datetime(2026, 1, 1, 0, 0, 0),
           "last_event_time": datetime(2026, 1, 1, 0, 1, 30), "first_topic": "sensors.s1",
           "first_partition": 0, "first_offset": 5, "updated_batch_id": 2,
           "topic": "sensors.s1", "partition": 0, "offset": 16}  # fmt: skip
VIOLATION = {"session_id": "a", "sensor_id": "s1", "reason": "gap", "detail": "", "batch_id": 0,
             "topic": "sensors.s1", "partition": 0, "offset": 9}  # fmt: skip


def test_a_summary_counts_the_sessions_violations_and_keeps_both_ends_lineage(
    spark: SparkSession,
) -> None:
    silver_sessions = spark.createDataFrame([SESSION], sessions.TABLE.columns)
    silver_violations = spark.createDataFrame(
        [VIOLATION, {**VIOLATION, "offset": 10}, {**VIOLATION, "session_id": None}],
        violations.TABLE.columns,
    )

    (row,) = session_summary(silver_sessions, silver_violations).collect()

    assert (row.violations, row.gaps, row.final_rows, row.duration_seconds) == (2, 1, 3, 90.0)
    assert (row.first_offset, row.last_offset) == (5, 16)


def test_changed_sessions_are_those_with_a_new_summary_or_violation(spark: SparkSession) -> None:
    key = "sensor_id STRING, session_id STRING"
    summaries = spark.createDataFrame([("s1", "a")], key)
    rejections = spark.createDataFrame([("s1", "b"), ("s1", None)], key)

    expected = spark.createDataFrame([("s1", "a"), ("s1", "b")], key)
    assertDataFrameEqual(changed_sessions(summaries, rejections), expected)


def test_a_session_is_its_sensors_two_sensors_may_use_the_same_id(spark: SparkSession) -> None:
    other = {"sensor_id": "s2", "topic": "sensors.s2", "first_topic": "sensors.s2"}
    silver_sessions = spark.createDataFrame([SESSION, {**SESSION, **other}], sessions.TABLE.columns)
    silver_violations = spark.createDataFrame([VIOLATION], violations.TABLE.columns)

    rows = session_summary(silver_sessions, silver_violations).collect()

    assert sorted((r.sensor_id, r.session_id, r.violations) for r in rows) == [
        ("s1", "a", 1), ("s2", "a", 0),
    ]  # fmt: skip


def test_narrowing_cuts_both_inputs_to_the_given_sessions(spark: SparkSession) -> None:
    silver_sessions = spark.createDataFrame(
        [SESSION, {**SESSION, "session_id": "b"}], sessions.TABLE.columns
    )
    silver_violations = spark.createDataFrame(
        [VIOLATION, {**VIOLATION, "session_id": "b"}], violations.TABLE.columns
    )
    keys = spark.createDataFrame([("s1", "b")], "sensor_id STRING, session_id STRING")

    narrowed_sessions, narrowed_violations = of_sessions(keys, silver_sessions, silver_violations)

    assert [r.session_id for r in narrowed_sessions.collect()] == ["b"]
    assert [r.session_id for r in narrowed_violations.collect()] == ["b"]
