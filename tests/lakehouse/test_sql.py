"""Splitting scripts and printing results, without Spark."""

from __future__ import annotations

from datetime import datetime

import pytest
from pyspark.sql import Row

from lakehouse.errors import SettingsError
from lakehouse.settings import SQL_PASSWORD_ENV, SqlSettings
from lakehouse.sql import admission, authenticator_properties, render, split_statements


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


def _sql(**fields: object) -> SqlSettings:
    base = {"host": "127.0.0.1", "port": 10000, "user": "", "max_result_bytes": 1 << 20}
    return SqlSettings(**{**base, "query_timeout_seconds": 60, **fields})  # type: ignore[arg-type]


def test_the_server_admits_anyone_only_on_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SQL_PASSWORD_ENV, raising=False)
    assert admission(_sql()) == {}
    with pytest.raises(SettingsError, match=r"refusing to serve SQL on 0\.0\.0\.0 to anyone"):
        admission(_sql(host="0.0.0.0"))
    with pytest.raises(SettingsError, match=r"\$LAKEHOUSE_SQL_PASSWORD is not set"):
        admission(_sql(host="0.0.0.0", user="analyst"))


def test_a_user_is_admitted_by_the_password_the_servers_environment_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(SQL_PASSWORD_ENV, "never a property")
    conf = admission(_sql(host="0.0.0.0", user="analyst"))
    properties = authenticator_properties(_sql(host="0.0.0.0", user="analyst"))
    assert conf == {"spark.hadoop.hive.server2.authentication": "CUSTOM"}
    assert properties == {
        "hive.server2.custom.authentication.class": "lakehouse.sql.PasswordAuthenticator",
        "lakehouse.sql.user": "analyst",
    }
