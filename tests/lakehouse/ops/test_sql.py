"""Splitting scripts and printing results, without Spark."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import pytest
from pyspark.sql import Row

from lakehouse.core.errors import SettingsError
from lakehouse.core.settings import SQL_PASSWORD_ENV, SqlSettings
from lakehouse.ops.sql import (
    admission,
    authenticator_properties,
    jdbc_url,
    render,
    server_tls,
    session_conf,
    split_statements,
)
from lakehouse.runtime.spark import secret
from lakehouse.services.tls import subject_names


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
        "hive.server2.custom.authentication.class": "lakehouse.sql.PasswordAuthenticator"
    }


def test_statements_reach_the_guard_as_written_and_never_as_a_script() -> None:
    conf = session_conf(allow_writes=False, sql=_sql())
    assert conf["spark.lakehouse.sql.readOnly"] == "true"
    assert conf["spark.sql.variable.substitute"] == "false"
    assert conf["spark.sql.scripting.enabled"] == "false"
    scan = "Location: PreparedDeltaFileIndex(1 paths)[file:/lake/gold/x, s3a://bucket/gold/y]"
    hidden = re.sub(conf["spark.sql.redaction.string.regex"], "*", scan)
    assert hidden == "Location: PreparedDeltaFileIndex(1 paths)[*, *]"
    assert "lakehouse.sql.ReadOnlyExtension" in conf["spark.sql.extensions"]


def test_the_server_opens_nothing_beside_its_port_and_substitutes_nothing_a_client_sends() -> None:
    conf = session_conf(allow_writes=False, sql=_sql(), server_port=10000)
    assert conf["spark.ui.enabled"] == conf["spark.ui.killEnabled"] == "false"
    assert conf["spark.hadoop.hive.variable.substitute"] == "false"
    restricted = conf["spark.hadoop.hive.conf.restricted.list"].split(",")
    assert {"hive.variable.substitute", "hive.conf.restricted.list"} <= set(restricted)
    blocked = conf["spark.hadoop.hive.ssl.protocol.blacklist"].split(",")
    assert {"SSLv3", "TLSv1", "TLSv1.1"} <= set(blocked) and "TLSv1.2" not in blocked


def test_a_certificate_names_the_host_its_server_listens_on() -> None:
    assert subject_names("db.example").endswith(",DNS:db.example")
    assert subject_names("10.0.0.5").endswith(",IP:10.0.0.5")
    assert subject_names("0.0.0.0") == subject_names() == subject_names("127.0.0.1")
    assert subject_names().startswith("DNS:localhost,IP:127.0.0.1,DNS:")


def test_beyond_loopback_the_server_speaks_tls_with_a_key_made_at_its_first_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(SQL_PASSWORD_ENV, "never a property")
    open_to_all = _sql(host="0.0.0.0", user="analyst")
    assert server_tls(_sql(), tmp_path) is None

    tls = server_tls(open_to_all, tmp_path)
    again = server_tls(open_to_all, tmp_path)
    conf = session_conf(allow_writes=False, sql=open_to_all, server_port=10000, tls=tls)

    assert tls is not None and again is not None and again.password() == tls.password()
    assert (tls.folder.stat().st_mode & 0o777) == 0o700
    assert tls.keystore.exists() and tls.truststore.exists()
    assert tls.ca_file.read_text().startswith("-----BEGIN CERTIFICATE-----")
    assert conf["spark.hadoop.hive.server2.use.SSL"] == "true"
    assert conf["spark.hadoop.hive.server2.keystore.path"] == str(tls.keystore)
    password = "spark.hadoop.hive.server2.keystore.password"
    assert conf[password] == tls.password() and secret(password, conf[password])
    assert jdbc_url("db.example", 10000, tls) == (
        f"jdbc:hive2://db.example:10000/gold;ssl=true;sslTrustStore={tls.truststore};"
        "trustStorePassword=lakehouse-ca"
    )
