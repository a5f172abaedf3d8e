"""Gold tables by name from other Spark applications: `lakehouse sql` and the SQL server
queried with the beeline that ships with pyspark; both read-only unless told otherwise."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import SparkSession

from lakehouse import PROJECT_ROOT
from lakehouse.incremental import run_models
from lakehouse.pipeline import MODELS
from lakehouse.services import process
from lakehouse.settings import Settings
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
    assert spark.table("gold.sensor_daily").count() == rows
    assert allowed.returncode == 0, allowed.stderr[-2000:]
    assert spark.catalog.tableExists("gold.busy_hours")
    spark.sql("DROP VIEW gold.busy_hours")


def test_sql_server_answers_beeline_and_refuses_its_writes(
    spark: SparkSession, gold_lake: tuple[Settings, dict[str, str]]
) -> None:
    _, env = gold_lake
    port = process.free_port()
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
        answer = beeline(port, HOURLY)
        refusal = beeline(port, "DROP TABLE gold.sensor_hourly")
    finally:
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=60)

    assert answer.returncode == 0, answer.stderr[-2000:]
    rows = list(csv.reader(_without_prompt(answer.stdout)))
    assert rows[0] == ["sensor_id", "hour", "updates"]
    assert [[s, h[:19], u] for s, h, u in rows[1:]] == expected_hourly(spark)
    assert refusal.returncode != 0
    assert (
        "read-only: DROP TABLE (DropTable) changes data or the catalog"
        in refusal.stdout + refusal.stderr
    )
    assert spark.catalog.tableExists("gold.sensor_hourly")
    assert server.returncode == 0, err[-2000:]
    assert "SQL server (read-only) on jdbc:hive2://127.0.0.1:" in out


def beeline(port: int, statement: str) -> subprocess.CompletedProcess[str]:
    home = Path(pyspark.__file__).parent
    return subprocess.run(
        [
            str(home / "bin" / "beeline"),
            "-u",
            f"jdbc:hive2://127.0.0.1:{port}/gold",
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
