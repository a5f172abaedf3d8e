"""The suite loader: every shipped suite loads, and every kind of mistake is named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lakehouse import PROJECT_ROOT
from lakehouse.quality.suites import QUARANTINABLE, SuiteError, load_suite, load_suites

GOOD_ENTRY = {
    "name": "key_present",
    "severity": "quarantine",
    "type": "expect_column_values_to_not_be_null",
    "kwargs": {"column": "key"},
}


def write_suite(tmp_path: Path, entries: list[Any], **suite: Any) -> Path:
    path = tmp_path / "bronze" / "sensor_records.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"table": "bronze.sensor_records", "row_key": ["topic"], "expectations": entries}
    path.write_text(json.dumps({**data, **suite}))
    return path


def test_every_shipped_suite_loads_with_all_its_entries() -> None:
    suites = load_suites(PROJECT_ROOT / "expectations")

    assert {s.table for s in suites} >= {
        "bronze.sensor_records",
        "silver.row_changes",
        "silver.sessions",
        "silver.violations",
    }
    for suite in suites:
        raw = json.loads(suite.path.read_text())
        assert len(suite.to_gx().expectations) == len(raw["expectations"]) == len(suite.checks)
        assert all(c.severity != "quarantine" or c.type in QUARANTINABLE for c in suite.checks)


def test_a_suite_entry_with_a_wrongly_typed_argument_is_an_error_naming_file_and_entry(
    tmp_path: Path,
) -> None:
    # Great Expectations' own store logs such an entry and drops it; a dropped check is a
    # check that silently never runs.
    bad = {**GOOD_ENTRY, "name": "offset_bounded", "kwargs": {"column": 5}}
    path = write_suite(tmp_path, [GOOD_ENTRY, bad])

    with pytest.raises(SuiteError) as error:
        load_suite(path)

    assert str(path) in str(error.value)
    assert "'offset_bounded'" in str(error.value) and "column" in str(error.value)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {**GOOD_ENTRY, "name": "b", "type": "expect_the_moon"},
            "unknown expectation type 'expect_the_moon'",
        ),
        ({**GOOD_ENTRY, "severity": "panic"}, "severity 'panic' is none of fail, quarantine, warn"),
        ({**GOOD_ENTRY, "name": "b", "kwargs": {"column": "k", "colour": 1}}, "colour"),
        ({**GOOD_ENTRY, "sevrity": "warn"}, "unknown keys ['sevrity']"),
        ({k: v for k, v in GOOD_ENTRY.items() if k != "name"}, "`name` must be a str"),
        ({**GOOD_ENTRY, "in_stream": "no"}, "`in_stream` must be true or false"),
        (
            {
                **GOOD_ENTRY,
                "type": "expect_table_row_count_to_be_between",
                "kwargs": {"min_value": 1},
            },
            "cannot quarantine",
        ),
    ],
)
def test_a_bad_entry_is_refused_with_its_number_and_reason(
    tmp_path: Path, entry: dict[str, Any], message: str
) -> None:
    path = write_suite(tmp_path, [GOOD_ENTRY, entry])

    with pytest.raises(SuiteError, match="expectation") as error:
        load_suite(path)

    assert message in str(error.value)


def test_a_stream_validates_only_the_entries_not_left_to_check(tmp_path: Path) -> None:
    batch_only = {**GOOD_ENTRY, "name": "value_present", "in_stream": False}
    suite = load_suite(write_suite(tmp_path, [GOOD_ENTRY, batch_only]))

    assert [c.name for c in suite.checks] == ["key_present", "value_present"]
    assert [c.name for c in suite.in_stream().checks] == ["key_present"]


def test_repeated_names_and_a_suite_for_another_table_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SuiteError, match="repeated: \\['key_present'\\]"):
        load_suite(write_suite(tmp_path, [GOOD_ENTRY, GOOD_ENTRY]))
    with pytest.raises(SuiteError, match=r"a suite in this file is for 'bronze\.sensor_records'"):
        load_suite(write_suite(tmp_path, [GOOD_ENTRY], table="silver.sessions"))


def test_invalid_json_names_the_line(tmp_path: Path) -> None:
    path = write_suite(tmp_path, [GOOD_ENTRY])
    path.write_text('{\n  "table": "bronze.sensor_records",\n  oops\n}')

    with pytest.raises(SuiteError, match=f"{path}:3: not valid JSON"):
        load_suite(path)


def test_selecting_a_layer_or_a_table_that_has_no_suite_is_an_error() -> None:
    folder = PROJECT_ROOT / "expectations"

    assert [s.table for s in load_suites(folder, "silver.sessions")] == ["silver.sessions"]
    assert {s.layer for s in load_suites(folder, "silver")} == {"silver"}
    with pytest.raises(SuiteError, match="no suite for 'platinum'"):
        load_suites(folder, "platinum")


def test_a_suite_that_reads_the_clock_is_never_judged_by_an_earlier_outcome(
    tmp_path: Path,
) -> None:
    from lakehouse.quality.checks import _reads_the_clock

    # The shipped suites judge rows alone: a check of the same versions can be reused.
    assert not any(_reads_the_clock(s) for s in load_suites(PROJECT_ROOT / "expectations"))
    for query in (
        "SELECT * FROM {batch} WHERE ingested_at < current_timestamp() - INTERVAL 1 HOUR",
        "SELECT * FROM {batch} WHERE day < CURRENT_DATE",
        "SELECT * FROM {batch} WHERE unix_timestamp( ) - unix_timestamp(at) > 60",
        "SELECT * FROM {batch} WHERE rand() < 0.01",
    ):
        entry = {"name": "fresh", "severity": "warn", "type": "unexpected_rows_expectation",
                 "kwargs": {"unexpected_rows_query": query}}  # fmt: skip
        assert _reads_the_clock(load_suite(write_suite(tmp_path, [entry]))), query
    # A time parsed from a column is the rows' own: the same rows, the same outcome.
    parsed = {"name": "parsed", "severity": "warn", "type": "unexpected_rows_expectation",
              "kwargs": {"unexpected_rows_query": "SELECT * FROM {batch} WHERE "
                         "unix_timestamp(at) < 0"}}  # fmt: skip
    assert not _reads_the_clock(load_suite(write_suite(tmp_path, [parsed])))
