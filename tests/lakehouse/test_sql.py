"""Splitting scripts and printing results, without Spark."""

from __future__ import annotations

from datetime import datetime

from pyspark.sql import Row

from lakehouse.sql import render, split_statements


def test_a_script_splits_at_semicolons_outside_quotes_and_comments() -> None:
    script = "SELECT 'a;b' AS x; -- a comment; with a semicolon\nSELECT `c;d` FROM t;\n\n"
    assert split_statements(script) == ["SELECT 'a;b' AS x", "SELECT `c;d` FROM t"]


def test_a_table_aligns_columns_and_right_aligns_numbers() -> None:
    lines = list(render(["sensor_id", "updates"], [("sensor-001", 5), ("s2", 12345)], "table"))
    assert lines == [
        "sensor_id  | updates",
        "-----------+--------",
        "sensor-001 |       5",
        "s2         |   12345",
        "(2 rows)",
    ]


def test_csv_has_a_header_and_quotes_what_needs_it() -> None:
    assert list(render(["a", "b"], [("x,y", None)], "csv")) == ["a,b", '"x,y",NULL']


def test_json_is_one_object_per_row_with_nested_values_and_iso_times() -> None:
    rows = [(datetime(2026, 1, 1, 0, 30), ["s1", "s2"], Row(n=1))]
    assert list(render(["hour", "sessions", "s"], rows, "json")) == [
        '{"hour": "2026-01-01 00:30:00", "sessions": ["s1", "s2"], "s": {"n": 1}}'
    ]
