"""Each suite on a small good frame (passes) and small bad frames (the intended expectation
fails, with the intended consequence), through the same gate the streams use."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bronze import sensor_records
from lakehouse import PROJECT_ROOT
from lakehouse.core.settings import StorageSettings
from lakehouse.quality import conditions, store
from lakehouse.quality.gates import BatchGate, QualityError
from lakehouse.quality.suites import load_suites
from lakehouse.quality.validator import Validator
from lakehouse.storage import delta
from lakehouse.storage.delta import Txn
from silver import row_changes, session_rows, sessions, violations
from tests.support.quality import NOW, good_rows, lineage

pytestmark = pytest.mark.integration

SCHEMAS = {
    spec.name: spec.columns
    for spec in (
        sensor_records.TABLE,
        row_changes.TABLE,
        sessions.TABLE,
        violations.TABLE,
        session_rows.TABLE,
    )
}


def change(index: int, **fields: Any) -> Callable[[list[dict[str, Any]]], None]:
    def mutate(rows: list[dict[str, Any]]) -> None:
        rows[index].update(fields)

    return mutate


def add_copy_of(index: int, **fields: Any) -> Callable[[list[dict[str, Any]]], None]:
    def mutate(rows: list[dict[str, Any]]) -> None:
        rows.append({**rows[index], **fields})

    return mutate


BAD_FRAMES = [
    ("bronze.sensor_records", "record_unique", "fail", add_copy_of(1)),
    ("bronze.sensor_records", "key_present", "quarantine", change(2, key=None)),
    ("bronze.sensor_records", "value_present", "quarantine", change(2, value=None)),
    ("bronze.sensor_records", "value_within_size_bound", "quarantine",
     change(3, value=b"x" * (256 * 1024 + 1))),
    ("bronze.sensor_records", "timestamps_sane", "warn",
     change(0, kafka_timestamp=NOW + timedelta(days=2))),
    ("silver.row_changes", "change_unique", "fail", add_copy_of(4, ordinal=9)),
    ("silver.row_changes", "seq_contiguous", "fail", change(5, seq=5, **lineage(5))),
    ("silver.row_changes", "op_valid", "fail", change(4, op="upsert")),
    ("silver.row_changes", "status_valid", "quarantine", change(4, status="melting")),
    ("silver.row_changes", "values_in_range", "quarantine", change(5, humidity=140.0)),
    ("silver.session_rows", "row_unique", "fail", add_copy_of(0, seq=4)),
    ("silver.session_rows", "lineage_present", "fail", change(1, topic=None)),
    ("silver.sessions", "session_unique", "fail", add_copy_of(0, status="closed")),
    ("silver.sessions", "status_valid", "fail", change(1, status="lost")),
    ("silver.sessions", "lineage_present", "fail", change(1, first_topic=None)),
    ("silver.sessions", "violation_rate_below_bound", "warn", change(2, rejected=40)),
    ("silver.violations", "reason_known", "fail", change(0, reason="bad_luck")),
    ("silver.violations", "lineage_present", "fail", change(0, offset=None)),
]  # fmt: skip


@pytest.fixture(scope="module")
def validator() -> Validator:
    return Validator(load_suites(PROJECT_ROOT / "expectations"))


def frame(spark: SparkSession, table: str, rows: list[dict[str, Any]]) -> DataFrame:
    # Nullable, so that a frame can hold what a table's NOT NULL would refuse.
    return spark.createDataFrame(rows, SCHEMAS[table].replace(" NOT NULL", "")).persist()


def gate(validator: Validator, storage: StorageSettings, table: str, batch_id: int) -> BatchGate:
    return BatchGate(validator, storage, table.split(".")[0], Txn("test", batch_id), "run-1")


@pytest.mark.parametrize("table", sorted(SCHEMAS))
def test_a_good_frame_passes_every_expectation_of_its_suite(
    spark: SparkSession, validator: Validator, table: str
) -> None:
    outcomes = validator.validate(frame(spark, table, good_rows(table)), table, "SUMMARY")

    assert [o.check.name for o in outcomes if not o.success] == []
    assert len(outcomes) == len(validator.suites[table].checks)


@pytest.mark.parametrize(("table", "expectation", "severity", "mutate"), BAD_FRAMES)
def test_a_bad_frame_fails_the_intended_expectation_with_its_consequence(
    spark: SparkSession,
    validator: Validator,
    tmp_path: Path,
    table: str,
    expectation: str,
    severity: str,
    mutate: Callable[[list[dict[str, Any]]], None],
) -> None:
    storage = StorageSettings(tmp_path.as_uri(), "", 60)
    layer = table.split(".")[0]
    store.create_tables(spark, storage, layer, [layer])
    rows = good_rows(table)
    mutate(rows)
    batch = frame(spark, table, rows)
    assert validator.suites[table].check(expectation).severity == severity

    batch_gate = gate(validator, storage, table, 0)
    admitted = batch_gate.admit(batch, table)
    if severity == "fail":
        with pytest.raises(QualityError, match=f"{table} batch 0: expectation {expectation}"):
            batch_gate.commit()
    else:
        batch_gate.commit()

    results = store.read_results(spark, storage)
    assert results is not None
    failed = {r.expectation for r in results.where("NOT success").collect()}
    assert failed == {expectation}
    quarantine = spark.read.format("delta").load(storage.table_uri(f"{layer}.quarantine")).collect()
    if severity == "quarantine":
        assert admitted.count() == len(rows) - 1
        assert [r.expectation for r in quarantine] == [expectation]
        (restored,) = store.quarantined_rows(spark, storage, table, SCHEMAS[table]).collect()
        assert restored.asDict() == {
            **batch.exceptAll(admitted).first().asDict(),
            "expectation": expectation,
        }
    else:
        assert admitted.count() == len(rows)
        assert quarantine == []


@pytest.mark.parametrize(
    ("table", "expectation", "mutate", "offset"),
    [("silver.row_changes", "op_valid", change(4, op="upsert"), 102),
     ("silver.row_changes", "seq_contiguous", change(5, seq=5, **lineage(5)), 105),
     ("silver.sessions", "session_unique", add_copy_of(1, status="closed"), 101),
     ("bronze.sensor_records", "record_unique", add_copy_of(3), 103)],
)  # fmt: skip
def test_a_failed_fail_expectation_names_the_first_offending_record(
    spark: SparkSession,
    validator: Validator,
    tmp_path: Path,
    table: str,
    expectation: str,
    mutate: Callable[[list[dict[str, Any]]], None],
    offset: int,
) -> None:
    rows = good_rows(table)
    mutate(rows)
    batch_gate = gate(validator, StorageSettings(tmp_path.as_uri(), "", 60), table, 0)
    batch_gate.admit(frame(spark, table, rows), table)

    with pytest.raises(QualityError) as error:
        batch_gate.commit()

    assert f"expectation {expectation} (fail) failed: " in str(error.value)
    assert f"first at sensors.s1/0@{offset};" in str(error.value)


def test_a_replayed_batch_records_its_results_and_quarantine_once(
    spark: SparkSession, validator: Validator, tmp_path: Path
) -> None:
    storage, table = StorageSettings(tmp_path.as_uri(), "", 60), "bronze.sensor_records"
    store.create_tables(spark, storage, "bronze", ["bronze"])
    rows = good_rows(table)
    change(2, key=None)(rows)
    batch = frame(spark, table, rows)

    for _ in range(2):  # the same micro-batch again, as after a crash before commit
        batch_gate = gate(validator, storage, table, 5)
        batch_gate.admit(batch, table)
        batch_gate.commit()

    results = store.read_results(spark, storage)
    assert results is not None
    assert results.count() == len(validator.suites[table].checks)
    assert spark.read.format("delta").load(storage.table_uri("bronze.quarantine")).count() == 1


WHOLE_BATCH = {"record_unique", "change_unique", "seq_contiguous", "row_unique", "session_unique"}
"""The shipped expectations that judge a batch, not single rows: uniqueness, and a window."""


def test_only_expectations_that_judge_single_rows_are_judged_outside_great_expectations(
    validator: Validator,
    spark: SparkSession,  # conditions are Spark columns: they need a running session
) -> None:
    whole_batch = {
        check.name
        for suite in validator.suites.values()
        if suite.layer != "gold"  # a gold model is judged whole, never in its write
        for check in suite.checks
        if conditions.row_condition(check) is None
    }

    assert whole_batch == WHOLE_BATCH


@pytest.mark.parametrize(("table", "expectation", "severity", "mutate"), BAD_FRAMES)
def test_spark_counts_the_rows_great_expectations_finds_unexpected(
    spark: SparkSession,
    validator: Validator,
    table: str,
    expectation: str,
    severity: str,
    mutate: Callable[[list[dict[str, Any]]], None],
) -> None:
    """What lets a stream judge its batch without Great Expectations where all is well:
    single rows by their condition, uniqueness and whole-batch queries by their counts."""
    rows = good_rows(table)
    mutate(rows)
    batch = frame(spark, table, rows)
    check = validator.suites[table].check(expectation)

    (judged,) = validator.validate(batch, table, "SUMMARY", [expectation])
    counts = conditions.unexpected_counts(batch, [check])

    assert counts is not None and counts[conditions.ROWS] == len(rows)
    gx_count = judged.unexpected_count
    if gx_count is None:  # a query observes the rows it returns
        gx_count = int(judged.observed_value or 0)
    assert counts[expectation] == gx_count > 0
    if expectation not in WHOLE_BATCH:
        condition = conditions.row_condition(check)
        assert condition is not None
        assert batch.where(F.coalesce(condition, F.lit(False))).count() == gx_count == 1


def test_a_batch_judged_in_its_write_keeps_good_rows_and_records_once_what_it_found(
    spark: SparkSession, tmp_path: Path
) -> None:
    storage, table = StorageSettings(tmp_path.as_uri(), "", 60), "bronze.sensor_records"
    store.create_tables(spark, storage, "bronze", ["bronze"])
    location = storage.table_uri(table)
    delta.create(spark, sensor_records.TABLE, location)
    suite = load_suites(PROJECT_ROOT / "expectations", table)[0].in_stream()
    streamed = Validator([suite])
    rows = good_rows(table)
    for mutate in (change(0, kafka_timestamp=NOW + timedelta(days=2)), change(2, key=None),
                   change(3, value=b"x" * (256 * 1024 + 1))):  # fmt: skip
        mutate(rows)
    batch = frame(spark, table, rows)

    for _ in range(2):  # the same micro-batch again, as after a crash before its offsets commit
        gate(streamed, storage, table, 5).append(batch, table, location)

    written = spark.read.format("delta").load(location)
    assert sorted(r.offset for r in written.collect()) == [100, 101]
    quarantine = spark.read.format("delta").load(storage.table_uri("bronze.quarantine"))
    assert sorted((r.expectation, r.offset) for r in quarantine.collect()) == [
        ("key_present", 102),
        ("value_within_size_bound", 103),
    ]
    results = store.read_results(spark, storage)
    assert results is not None
    found = {r.expectation: (r.success, r.unexpected_count, r.element_count, r.quarantined)
             for r in results.collect()}  # fmt: skip
    assert found == {
        "lineage_present": (True, 0, 4, None),
        "key_present": (False, 1, 4, 1),
        "value_present": (True, 0, 4, None),
        "value_within_size_bound": (False, 1, 4, 1),
        "timestamps_sane": (False, 1, 4, None),
    }
    assert "record_unique" not in {c.name for c in suite.checks}  # left to `lakehouse check`


def test_a_fail_row_found_in_the_write_stops_the_batch_before_delta_commits(
    spark: SparkSession, validator: Validator, tmp_path: Path
) -> None:
    storage, table = StorageSettings(tmp_path.as_uri(), "", 60), "silver.violations"
    store.create_tables(spark, storage, "silver", ["silver"])
    location = storage.table_uri(table)
    delta.create(spark, violations.TABLE, location)
    rows = good_rows(table)
    change(1, reason="bad_luck")(rows)

    with pytest.raises(QualityError) as error:
        gate(validator, storage, table, 0).append(frame(spark, table, rows), table, location)

    assert "expectation reason_known (fail) failed: unexpected 1" in str(error.value)
    assert "first at sensors.s1/0@101;" in str(error.value)
    assert spark.read.format("delta").load(location).count() == 0
