"""Gold tables by name from other Spark applications: `lakehouse sql` and the SQL server
queried with the beeline that ships with pyspark; both read-only unless told otherwise."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import SparkSession

from lakehouse import PROJECT_ROOT
from lakehouse.catalog import LAYERS
from lakehouse.incremental import run_models
from lakehouse.pipeline import MODELS
from lakehouse.services import process
from lakehouse.settings import SQL_PASSWORD_ENV, Settings
from silver import reconstruct
from tests.integration.test_gold import INCREMENTS, Bronze
from tests.support import lakehouse_command, overrides, run_lakehouse, settings_for

pytestmark = pytest.mark.integration

HOURLY = "SELECT sensor_id, hour, updates FROM gold.sensor_hourly ORDER BY sensor_id, hour"


@pytest.fixture(scope="module")
def gold_lake(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Settings, dict[str, str]]:
    """Gold built twice (two versions), its tables registered by the jobs that wrote them."""
    root = tmp_path_factory.mktemp("sql")
    s = settings_for(root, "127.0.0.1:9", "sensors.", quality__validate_streams="false")
    bronze = Bronze(spark, s.storage.table_uri("bronze.sensor_records"))
    for spec in INCREMENTS[:2]:
        bronze.append(spec)
        reconstruct.run(spark, s)
        run_models(spark, s.storage, MODELS)
    return s, overrides(root, "127.0.0.1:9", "sensors.")


def expected_hourly(spark: SparkSession, version: int | None = None) -> list[list[str]]:
    travel = f" VERSION AS OF {version}" if version is not None else ""
    query = HOURLY.replace("gold.sensor_hourly", f"gold.sensor_hourly{travel}")
    return [
        [r.sensor_id, f"{r.hour:%Y-%m-%d %H:%M:%S}", str(r.updates)]
        for r in spark.sql(query).collect()
    ]


def test_sql_prints_gold_by_name_as_csv_json_and_a_table_with_time_travel(
    spark: SparkSession, gold_lake: tuple[Settings, dict[str, str]], tmp_path: Path
) -> None:
    _, env = gold_lake
    first = int(spark.sql("DESCRIBE HISTORY gold.sensor_hourly").agg({"version": "min"}).first()[0])
    script = tmp_path / "hourly.sql"
    then = HOURLY.replace("ORDER", f"VERSION AS OF {first + 1} ORDER")
    script.write_text(f"-- now, then as first built\n{HOURLY};\n{then};\n")

    as_csv = run_lakehouse("sql", "--format", "csv", "-f", str(script), env=env)
    as_json = run_lakehouse("sql", "--format", "json", "SELECT * FROM gold.sensor_daily", env=env)
    as_table = run_lakehouse(
        "sql", "SELECT count(*) AS sessions FROM gold.session_summary", env=env
    )

    assert as_csv.returncode == 0, as_csv.stderr[-2000:]
    rows = list(csv.reader(as_csv.stdout.splitlines()))
    header_at = [i for i, r in enumerate(rows) if r == ["sensor_id", "hour", "updates"]]
    assert len(header_at) == 2
    now, then = rows[1 : header_at[1]], rows[header_at[1] + 1 :]
    assert now == expected_hourly(spark)
    assert then == expected_hourly(spark, first + 1) != now
    daily = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert sorted((d["sensor_id"], d["day"]) for d in daily) == sorted(
        (r.sensor_id, f"{r.day}") for r in spark.table("gold.sensor_daily").collect()
    )
    sessions = spark.table("gold.session_summary").count()
    assert as_table.stdout.splitlines() == ["sessions", "--------", f"{sessions:>8}", "(1 row)"]


def test_sql_refuses_ddl_and_dml_unless_writes_are_allowed(
    spark: SparkSession, gold_lake: tuple[Settings, dict[str, str]]
) -> None:
    _, env = gold_lake
    rows = spark.table("gold.sensor_daily").count()

    refused = run_lakehouse(
        "sql", "DELETE FROM gold.sensor_daily; DROP TABLE gold.sensor_daily", env=env
    )
    by_path = run_lakehouse("sql", "SELECT * FROM text.`/etc/passwd`", env=env)
    allowed = run_lakehouse(
        "sql",
        "--allow-writes",
        "CREATE OR REPLACE VIEW gold.busy_hours AS "
        "SELECT * FROM gold.sensor_hourly WHERE updates > 5",
        env=env,
    )

    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1] == (
        "lakehouse: error: statement 1: read-only: DELETE (DeleteCommand) changes data or the "
        "catalog; rerun with --allow-writes to permit it"
    )
    assert by_path.returncode == 1
    assert by_path.stderr.strip().splitlines()[-1] == (
        "lakehouse: error: read-only: reading `text`.`/etc/passwd` is refused: a file, a path "
        f"or a database outside the lake's ({','.join(LAYERS)}); {READ_ONLY}"
    )
    assert spark.table("gold.sensor_daily").count() == rows
    assert allowed.returncode == 0, allowed.stderr[-2000:]
    assert spark.catalog.tableExists("gold.busy_hours")
    spark.sql("DROP VIEW gold.busy_hours")


READ_ONLY = "downstream SQL reads the lake's tables by name only"
BY_PATH = "is refused: a file, a path or a database outside the lake's"
NOT_A_VALUE_FUNCTION = "not allowed in downstream SQL: only built-in functions that compute on"
WRITES = "changes data or the catalog; rerun with --allow-writes"
JVM_CALL = "'java.lang.System', 'getProperty', 'user.name'"


@pytest.mark.parametrize(
    ("statement", "refusal"),
    [
        (
            f"SELECT reflect({JVM_CALL})",
            f"the function (reflect|java_method) .*{NOT_A_VALUE_FUNCTION}",
        ),
        (f"SELECT java_method({JVM_CALL})", NOT_A_VALUE_FUNCTION),
        (f"SELECT try_reflect({JVM_CALL})", NOT_A_VALUE_FUNCTION),
        ("SELECT xpath('<a><b>1</b></a>', 'a/b')", NOT_A_VALUE_FUNCTION),
        ("SELECT * FROM text.`/etc/passwd`", BY_PATH),
        ("SELECT * FROM binaryFile.`/etc/passwd`", BY_PATH),
        ("SELECT * FROM csv.`/etc/passwd`", BY_PATH),
        ("SELECT * FROM delta.`{gold}`", BY_PATH),
        ("SELECT * FROM parquet.`{gold}`", BY_PATH),
        ("SELECT (SELECT count(*) FROM text.`/etc/passwd`)", BY_PATH),
        ("CREATE TEMPORARY VIEW pw AS SELECT * FROM text.`/etc/passwd`", BY_PATH),
        (
            "CREATE TEMPORARY VIEW j USING jdbc OPTIONS (url 'jdbc:derby:memory:x', dbtable 'x')",
            f"CREATE TEMPORARY VIEW ... USING .*reads a data source; {READ_ONLY}",
        ),
        (
            "SET spark.hadoop.fs.s3a.endpoint=http://elsewhere",
            "SET spark.hadoop.fs.s3a.endpoint is refused",
        ),
        (
            "SET spark.sql.catalog.other=org.example.Catalog",
            "SET spark.sql.catalog.other is refused",
        ),
        ("ADD JAR /tmp/x.jar", f"ADD JARS .*{WRITES}"),
        ("CREATE TEMPORARY FUNCTION f AS 'org.example.F'", f"CREATE FUNCTION .*{WRITES}"),
        (
            "INSERT INTO gold.sensor_daily SELECT * FROM gold.sensor_daily",
            f"INSERT INTO .*{WRITES}",
        ),
        ("DELETE FROM gold.sensor_daily", f"DELETE .*{WRITES}"),
    ],
)
def test_the_guard_refuses_whatever_reaches_beyond_the_lakes_tables(
    spark: SparkSession, gold_lake: tuple[Settings, dict[str, str]], statement: str, refusal: str
) -> None:
    settings, _ = gold_lake
    statement = statement.format(gold=settings.storage.table_uri("gold.sensor_daily"))
    said = guard_check(spark, statement)
    assert said is not None and re.search(refusal, said), said


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT sensor_id, count(*), round(avg(updates), 2), max(hour) FROM gold.sensor_hourly "
        "GROUP BY sensor_id",
        "SELECT * FROM gold.sensor_hourly VERSION AS OF 1",
        "SELECT sensor_id, rank() OVER (ORDER BY updates DESC) FROM gold.sensor_daily",
        "WITH d AS (SELECT * FROM gold.sensor_daily) SELECT * FROM d JOIN gold.sensor_hourly "
        "USING (sensor_id) WHERE d.updates IN (SELECT updates FROM gold.sensor_daily)",
        "SELECT date_trunc('day', hour), coalesce(sensor_id, '?'), current_user() "
        "FROM gold.sensor_hourly",
        "SELECT * FROM range(3)",
        "DESCRIBE TABLE EXTENDED gold.sensor_hourly",
        "DESCRIBE HISTORY gold.sensor_hourly",
        "DESCRIBE DETAIL gold.sensor_hourly",
        "SHOW TABLES IN gold",
        "SHOW CREATE TABLE gold.sensor_hourly",
        "EXPLAIN SELECT * FROM gold.sensor_hourly",
        "SET spark.sql.session.timeZone=UTC",
        "SET",
        "CREATE TEMPORARY VIEW busy AS SELECT * FROM gold.sensor_hourly WHERE updates > 5",
    ],
)
def test_the_guard_lets_analysts_read_tables_by_name_travel_describe_show_and_explain(
    spark: SparkSession, gold_lake: tuple[Settings, dict[str, str]], statement: str
) -> None:
    assert guard_check(spark, statement) is None


def guard_check(spark: SparkSession, statement: str) -> str | None:
    """The guard's refusal of `statement`, as parsed then as analyzed in `spark`, without
    running it."""
    state = spark._jsparkSession.sessionState()  # type: ignore[attr-defined]
    guard = spark._jvm.lakehouse.sql.ReadOnlyExtension  # type: ignore[attr-defined]
    parsed = state.sqlParser().parsePlan(statement)
    refusal = guard.checkStatement(parsed, ",".join(LAYERS))
    return refusal or guard.check(state.analyzer().execute(parsed))


def test_sql_server_admits_its_user_bounds_each_statement_and_refuses_writes(
    spark: SparkSession, gold_lake: tuple[Settings, dict[str, str]], tmp_path: Path
) -> None:
    _, lake = gold_lake
    port = process.free_port()
    env = {
        **lake,
        "LAKEHOUSE__SQL__HOST": "0.0.0.0",
        "LAKEHOUSE__SQL__USER": "analyst",
        "LAKEHOUSE__SQL__MAX_RESULT_BYTES": str(8 << 20),
        "LAKEHOUSE__SQL__QUERY_TIMEOUT_SECONDS": "10",
    }
    # Beyond loopback, a server that would admit anyone does not start.
    refused = run_lakehouse("sql-server", "--port", str(port), env=env, timeout=120)
    assert refused.returncode == 2
    assert refused.stderr.strip().endswith(
        "sql.user is 'analyst' but $LAKEHOUSE_SQL_PASSWORD is not set: the server would "
        "admit no one"
    )
    env[SQL_PASSWORD_ENV] = PASSWORD
    server = subprocess.Popen(
        lakehouse_command("sql-server", "--port", str(port)),
        env={**os.environ, **env},
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 180
        while process.free(port):
            assert server.poll() is None, server.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the SQL server did not listen"
            time.sleep(0.5)
        said = {
            "answer": beeline(port, HOURLY, tmp_path),
            "stranger": beeline(port, HOURLY, tmp_path, password="guess"),
            "refusal": beeline(port, "DROP TABLE gold.sensor_hourly", tmp_path),
            "jvm_call": beeline(port, f"SELECT java_method({JVM_CALL})", tmp_path),
            "too_big": beeline(port, "SELECT sha2(string(id), 512) FROM range(400000)", tmp_path),
            "too_long": beeline(port, "SELECT max(id % 7) FROM range(1000000000000)", tmp_path),
        }
    finally:
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=60)

    answer = said.pop("answer")
    assert answer.returncode == 0, answer.stderr[-2000:]
    rows = list(csv.reader(_without_prompt(answer.stdout)))
    assert rows[0] == ["sensor_id", "hour", "updates"]
    assert [[s, h[:19], u] for s, h, u in rows[1:]] == expected_hourly(spark)
    assert all(r.returncode != 0 for r in said.values()), {
        n: r.stdout[-500:] + r.stderr[-1500:] for n, r in said.items() if r.returncode == 0
    }
    text = {name: r.stdout + r.stderr for name, r in said.items()}
    assert "Error validating the login" in text["stranger"]  # HiveServer2 tells no more
    assert "read-only: DROP TABLE (DropTable) changes data or the catalog" in text["refusal"]
    assert spark.catalog.tableExists("gold.sensor_hourly")
    assert NOT_A_VALUE_FUNCTION in text["jvm_call"]
    assert "bigger than spark.driver.maxResultSize (8.0 MiB)" in text["too_big"]
    assert "timed out" in text["too_long"].lower(), text["too_long"][-2000:]
    assert server.returncode == 0, err[-2000:]
    assert (
        "SQL server (read-only, admitting user analyst with its password) on jdbc:hive2://0.0.0.0:"
    ) in out


PASSWORD = "s3cret-kept-off-command-lines"
"""beeline splits its own `!connect` line at spaces and quotes: a plain password."""


def beeline(
    port: int, statement: str, folder: Path, user: str = "analyst", password: str = PASSWORD
) -> subprocess.CompletedProcess[str]:
    home = Path(pyspark.__file__).parent
    secret = folder / "password"  # beeline -w: the password stays off beeline's command line
    secret.write_text(password)
    secret.chmod(0o600)
    return subprocess.run(
        [
            str(home / "bin" / "beeline"),
            "-u",
            f"jdbc:hive2://127.0.0.1:{port}/gold",
            "-n",
            user,
            "-w",
            str(secret),
            "--silent=true",
            "--outputformat=csv2",
            "-e",
            statement,
        ],
        env={**os.environ, "SPARK_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=180,
    )


def _without_prompt(output: str) -> list[str]:
    """beeline 2.3 prints its prompt before the first line even when silent."""
    lines = [
        line.split("> ", 1)[-1] if "jdbc:hive2://" in line else line for line in output.splitlines()
    ]
    return [line for line in lines if line.strip()]
