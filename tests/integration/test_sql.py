"""Gold tables by name from other Spark applications: `lakehouse sql` and the SQL server
queried with the beeline that ships with pyspark; both read-only unless told otherwise.

One corpus of hostile statements and one of what analysts ask go through `lakehouse sql`
(one application, `--continue`) and through beeline against one server, which listens
beyond loopback with a user, a password and TLS."""

from __future__ import annotations

import csv
import itertools
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import SparkSession

from lakehouse import PROJECT_ROOT
from lakehouse.core.settings import SQL_PASSWORD_ENV, Settings
from lakehouse.definitions import MODELS
from lakehouse.graph.models import run_models
from lakehouse.ops.sql import jdbc_url
from lakehouse.services import process
from lakehouse.services.tls import SelfSigned
from silver import reconstruct
from tests.support import lakehouse_command, overrides, run_lakehouse, settings_for
from tests.support.gold import INCREMENTS, Bronze

pytestmark = pytest.mark.integration

HOURLY = "SELECT sensor_id, hour, updates FROM gold.sensor_hourly ORDER BY sensor_id, hour"
PROBE = "probe-value-never-shown"
"""A secret in the environment and in the application's Spark properties."""

READS = "downstream SQL reads the lake's tables by name"
BY_PATH = f"by path is refused; {READS}"
NOT_A_VALUE_FUNCTION = "is not allowed in downstream SQL: only built-in functions that compute"
WRITES = "changes data or the catalog, or reaches beyond the lake; rerun with --allow-writes"
OUTSIDE = "is outside the lake's"
JVM_CALL = "'java.lang.System', 'getenv', 'PROBE_SECRET'"
MEMORY = "so that one value cannot take the server's memory"

HOSTILE = [
    # files and tables by path, in every format, however the name is made
    ("SELECT * FROM text.`/etc/hostname`", f"reading Text `file:/etc/hostname` {BY_PATH}"),
    ("SELECT * FROM csv.`/etc/passwd`", BY_PATH),
    ("SELECT * FROM json.`/etc/passwd`", BY_PATH),
    ("SELECT * FROM binaryFile.`/etc/passwd`", BY_PATH),
    ("SELECT * FROM parquet.`{gold}`", BY_PATH),
    ("SELECT * FROM delta.`{gold}`", BY_PATH),
    ("SELECT * FROM IDENTIFIER('text.' || '`/etc/hostname`')", BY_PATH),
    ("SELECT (SELECT count(*) FROM text.`/etc/passwd`)", BY_PATH),
    ("SELECT * FROM gold.leak", f"reading Text `file:/etc/hostname` {BY_PATH}"),
    ("DESCRIBE HISTORY delta.`{gold}`", "DESCRIBE HISTORY of a table by path is refused"),
    ("DESCRIBE DETAIL '{gold}'", f"the database delta {OUTSIDE}"),
    # the JVM and the shell
    (
        f"SELECT reflect({JVM_CALL})",
        f"reflect \\(CallMethodViaReflection\\) {NOT_A_VALUE_FUNCTION}",
    ),
    (f"SELECT java_method({JVM_CALL})", NOT_A_VALUE_FUNCTION),
    (f"SELECT try_reflect({JVM_CALL})", NOT_A_VALUE_FUNCTION),
    (f"SELECT IDENTIFIER('java' || '_method')({JVM_CALL})", "the function java_method"),
    ("SELECT xpath('<a><b>1</b></a>', 'a/b')", NOT_A_VALUE_FUNCTION),
    ("SELECT input_file_name() FROM gold.sensor_daily", NOT_A_VALUE_FUNCTION),
    (
        "SELECT TRANSFORM(id) USING 'id; cat /etc/hostname' AS (l STRING) FROM range(1)",
        "the plan node ScriptTransformation is not one a read needs",
    ),
    # secrets through substitution, scripting, statements built from strings
    ("SELECT '${env:PROBE_SECRET}'", "${...} is refused: downstream SQL substitutes no variables"),
    ("SELECT '${spark.hadoop.fs.s3a.secret.key}'", "${...} is refused"),
    ("SELECT '${system:user.name}'", "${...} is refused"),
    (f"BEGIN SELECT java_method({JVM_CALL}); END", "SQL scripting (BEGIN ... END) is refused"),
    (
        f"EXECUTE IMMEDIATE 'SELECT java_method({JVM_CALL.replace(chr(39), chr(39) * 2)})'",
        NOT_A_VALUE_FUNCTION,
    ),
    ("EXECUTE IMMEDIATE 'DROP TABLE gold.sensor_daily'", f"DROP TABLE (DropTable) {WRITES}"),
    # other databases of the shared metastore
    ("USE default", f"the database default {OUTSIDE}"),
    ("SHOW TABLES IN default", OUTSIDE),
    ("SELECT * FROM default.outside", OUTSIDE),
    ("SELECT * FROM gold.plain", "a parquet table, not one of the lake's Delta tables"),
    # writes and DDL
    ("INSERT INTO gold.sensor_daily SELECT * FROM gold.sensor_daily", f"INSERT INTO .*{WRITES}"),
    ("DELETE FROM gold.sensor_daily", f"DELETE (DeleteCommand) {WRITES}"),
    ("UPDATE gold.sensor_daily SET updates = 0", WRITES),
    ("DROP TABLE gold.sensor_hourly", f"DROP TABLE (DropTable) {WRITES}"),
    ("CREATE TABLE gold.x (id INT) USING delta", WRITES),
    ("OPTIMIZE gold.sensor_daily", WRITES),
    ("CACHE TABLE gold.sensor_daily", WRITES),
    ("CREATE OR REPLACE VIEW gold.v AS SELECT 1", "only a temporary view of this session"),
    # code and files brought in, views over files
    ("ADD JAR /tmp/x.jar", f"ADD JARS (AddJarsCommand) {WRITES}"),
    ("ADD FILE /etc/passwd", WRITES),
    ("CREATE TEMPORARY FUNCTION f AS 'org.example.F'", f"CREATE FUNCTION .*{WRITES}"),
    ("CREATE TEMPORARY VIEW pw AS SELECT * FROM text.`/etc/passwd`", BY_PATH),
    ("CREATE TEMPORARY VIEW t USING text OPTIONS (path '/etc/passwd')", WRITES),
    (
        "CREATE TEMPORARY VIEW j USING jdbc OPTIONS (url 'jdbc:derby:memory:x', dbtable 'x')",
        WRITES,
    ),
    # settings
    ("SET spark.hadoop.fs.s3a.endpoint=http://elsewhere", "SET spark.hadoop.fs.s3a.endpoint is"),
    ("SET spark.sql.variable.substitute=true", "SET spark.sql.variable.substitute is refused"),
    ("SET spark.sql.thriftServer.queryTimeout=0", "is refused: downstream SQL may set only"),
    ("SET spark.lakehouse.sql.readOnly=false", "is refused"),
    ("SET spark.sql.autoBroadcastJoinThreshold=10g", "is refused"),
    ("RESET", f"RESET (ResetCommand) {WRITES}"),
    ("DECLARE VARIABLE v STRING DEFAULT 'x'", WRITES),
    # memory
    ("SELECT size(sequence(1, 500000000))", f"sequence is refused: .*500,000,000.*{MEMORY}"),
    ("SELECT repeat('x', 2000000000)", f"repeat is refused: .*{MEMORY}"),
    ("SELECT array_repeat('x', 2000000000)", MEMORY),
    ("SELECT explode(sequence(1, id)) FROM range(10)", "sequence with bounds from columns"),
    ("SELECT transform(sequence(1, 1000), x -> repeat('x', 1000000))", "in one expression"),
    ("SELECT transform(array(1, 2), x -> repeat('x', 10))", "inside a lambda function"),
    ("SELECT /*+ BROADCAST(r) */ * FROM range(10) r JOIN range(10) q USING (id)", "ResolvedHint"),
]
"""Each statement and (a regular expression of) its one-line refusal after `read-only: `."""

ALLOWED = [
    "SELECT sensor_id, count(*), round(avg(updates), 2), max(hour) FROM gold.sensor_hourly "
    "GROUP BY sensor_id",
    "SELECT count(*) FROM gold.sensor_hourly VERSION AS OF 1",
    "SELECT count(*) FROM gold.sensor_hourly TIMESTAMP AS OF '{first_built}'",
    "SELECT sensor_id, rank() OVER (ORDER BY updates DESC), lag(updates) OVER (PARTITION BY "
    "sensor_id ORDER BY day) FROM gold.sensor_daily",
    "WITH d AS (SELECT * FROM gold.sensor_daily) SELECT d.sensor_id FROM d JOIN "
    "gold.sensor_hourly h USING (sensor_id) WHERE d.updates IN (SELECT updates FROM "
    "gold.sensor_daily) LIMIT 5",
    "SELECT date_trunc('day', hour), coalesce(sensor_id, '?'), nullif(updates, 0), "
    "hour + INTERVAL 1 HOUR, explode(sequence(1, 3)), current_user() FROM gold.sensor_hourly",
    "SELECT * FROM range(3)",
    "SELECT sensor_id, sum(updates) FROM gold.sensor_daily GROUP BY ROLLUP (sensor_id)",
    "SELECT n FROM gold.sensor_daily d JOIN LATERAL (SELECT d.updates + 1 AS n)",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT * FROM r",
    "SELECT * FROM gold.sensor_daily TABLESAMPLE (50 PERCENT)",
    "DESCRIBE TABLE EXTENDED gold.sensor_hourly",
    "DESCRIBE HISTORY gold.sensor_hourly",
    "SHOW TABLES IN gold",
    "SHOW DATABASES",
    "EXPLAIN SELECT * FROM gold.sensor_hourly",
    "USE gold",
    "SET spark.sql.session.timeZone=UTC",
    "SET",
    "SET -v",
    "SET spark.hadoop.fs.s3a.secret.key",
    "CREATE TEMPORARY VIEW busy AS SELECT * FROM gold.sensor_hourly WHERE updates > 5",
    "SELECT count(*) FROM busy",
    "SELECT count(*) FROM gold.busy_hours",
    "SHOW DATABASES LIKE 'g*'",
    "DROP VIEW busy",
]


@dataclass(frozen=True)
class Lake:
    settings: Settings
    env: dict[str, str]
    gold_path: str
    first_built: str
    """A time between gold's first and second build, for TIMESTAMP AS OF."""


@pytest.fixture(scope="module")
def gold_lake(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    """Gold built twice (two versions), its tables registered by the jobs that wrote them,
    a Delta table outside the lake's databases, and two views in gold: over a gold table,
    and over a file."""
    root = tmp_path_factory.mktemp("sql")
    s = settings_for(root, "127.0.0.1:9", "sensors.", quality__validate_streams="false")
    bronze = Bronze(spark, s.storage.table_uri("bronze.sensor_records"))
    between = ""
    for built, spec in enumerate(INCREMENTS[:2]):
        bronze.append(spec)
        reconstruct.run(spark, s)
        run_models(spark, s.storage, MODELS)
        if not built:  # a time after this lake's first build (the catalog may name another)
            time.sleep(1.0)
            between = str(spark.sql("SELECT string(current_timestamp())").collect()[0][0])
            time.sleep(1.0)
    outside = f"LOCATION '{root}/outside'"
    spark.sql(f"CREATE TABLE IF NOT EXISTS default.outside (id INT) USING delta {outside}")
    env = overrides(root, "127.0.0.1:9", "sensors.")
    env["LAKEHOUSE__SPARK__CONF"] = json.dumps({"spark.hadoop.fs.s3a.secret.key": PROBE})
    env["PROBE_SECRET"] = PROBE
    spark.sql("CREATE OR REPLACE VIEW gold.busy_hours AS SELECT * FROM gold.sensor_hourly")
    spark.sql("CREATE OR REPLACE VIEW gold.leak AS SELECT * FROM text.`/etc/hostname`")
    spark.sql(f"CREATE TABLE IF NOT EXISTS gold.plain (id INT) USING parquet LOCATION '{root}/p'")
    yield Lake(s, env, s.storage.table_uri("gold.sensor_daily"), between)
    for view in ("busy_hours", "leak", "quiet_hours"):
        spark.sql(f"DROP VIEW IF EXISTS gold.{view}")
    spark.sql("DROP TABLE IF EXISTS gold.plain")


def corpus(lake: Lake) -> tuple[list[str], list[tuple[str, str]]]:
    """The allowed statements, then the hostile ones with their refusals, with the lake's
    paths and times. Without the script: `lakehouse sql` and beeline split text at `;`."""
    allowed = [s.format(first_built=lake.first_built) for s in ALLOWED]
    hostile = [(s.replace("{gold}", lake.gold_path), r) for s, r in HOSTILE if "BEGIN" not in s]
    return allowed, hostile


def refused(said: str, refusal: str) -> bool:
    """Whether a line says the refusal: its words, or a regular expression of them."""
    try:
        return refusal in said or bool(re.search(refusal, said))
    except re.error:
        return False


def test_sql_prints_gold_by_name_as_csv_and_json_with_time_travel_and_writes_when_allowed(
    spark: SparkSession, gold_lake: Lake, tmp_path: Path
) -> None:
    env = gold_lake.env
    first = int(spark.sql("DESCRIBE HISTORY gold.sensor_hourly").agg({"version": "min"}).first()[0])
    script = tmp_path / "hourly.sql"
    then = HOURLY.replace("ORDER", f"VERSION AS OF {first + 1} ORDER")
    script.write_text(f"-- now, then as first built\n{HOURLY};\n{then};\n")
    view = "CREATE VIEW gold.quiet_hours AS SELECT * FROM gold.sensor_hourly WHERE updates < 5"

    as_csv = run_lakehouse("sql", "--format", "csv", "-f", str(script), env=env)
    written = run_lakehouse(
        "sql",
        "--allow-writes",
        "--format",
        "json",
        f"{view}; SELECT * FROM gold.sensor_daily",
        env=env,
    )

    assert as_csv.returncode == 0, as_csv.stderr[-2000:]
    rows = list(csv.reader(as_csv.stdout.splitlines()))
    header_at = [i for i, r in enumerate(rows) if r == ["sensor_id", "hour", "updates"]]
    assert len(header_at) == 2
    now, then = rows[1 : header_at[1]], rows[header_at[1] + 1 :]
    assert now == expected_hourly(spark)
    assert then == expected_hourly(spark, first + 1) != now
    assert written.returncode == 0, written.stderr[-2000:]
    daily = [json.loads(line) for line in written.stdout.splitlines()]
    assert sorted((d["sensor_id"], d["day"]) for d in daily) == sorted(
        (r.sensor_id, f"{r.day}") for r in spark.table("gold.sensor_daily").collect()
    )
    assert spark.catalog.tableExists("gold.quiet_hours")


def expected_hourly(spark: SparkSession, version: int | None = None) -> list[list[str]]:
    travel = f" VERSION AS OF {version}" if version is not None else ""
    query = HOURLY.replace("gold.sensor_hourly", f"gold.sensor_hourly{travel}")
    return [
        [r.sensor_id, f"{r.hour:%Y-%m-%d %H:%M:%S}", str(r.updates)]
        for r in spark.sql(query).collect()
    ]


def test_sql_answers_analysts_and_refuses_each_hostile_statement_in_one_line(
    spark: SparkSession, gold_lake: Lake, tmp_path: Path
) -> None:
    allowed, hostile = corpus(gold_lake)
    daily = spark.table("gold.sensor_daily").count()
    script = tmp_path / "corpus.sql"
    statements = [*allowed, *(s for s, _ in hostile), "SELECT 'still answering' AS said"]
    script.write_text("".join(f"{s};\n" for s in statements))

    ran = run_lakehouse("sql", "--continue", "-f", str(script), env=gold_lake.env)

    assert ran.returncode == 1
    failures = [line for line in ran.stderr.splitlines() if line.startswith("lakehouse: error:")]
    summary = f"lakehouse: error: {len(hostile)} of {len(statements)} statements failed"
    assert failures.pop() == summary
    assert len(failures) == len(hostile), "\n".join(failures)
    numbered = enumerate(zip(failures, hostile, strict=True), len(allowed) + 1)
    for number, (failure, (statement, refusal)) in numbered:
        prefix = f"lakehouse: error: statement {number}: read-only: "
        assert failure.startswith(prefix), (statement, failure)
        assert refused(failure, refusal), (statement, failure)
    said_last = ["said           ", "---------------", "still answering", "(1 row)"]
    assert ran.stdout.splitlines()[-4:] == said_last
    databases = ["namespace", "---------", "bronze   ", "gold     ", "ops      ", "quality  "]
    assert "\n".join([*databases, "silver   ", "(5 rows)"]) in ran.stdout  # the lake's only
    assert re.search(r"spark\.hadoop\.fs\.s3a\.secret\.key +\| \*+\(redacted\)", ran.stdout)
    assert PROBE not in ran.stdout + ran.stderr
    assert spark.table("gold.sensor_daily").count() == daily
    assert spark.catalog.tableExists("gold.sensor_hourly")


@dataclass(frozen=True)
class Server:
    port: int
    tls: SelfSigned
    output: list[str]


PASSWORD = "s3cret-kept-off-command-lines"
"""beeline splits its own `!connect` line at spaces and quotes: a plain password."""


@pytest.fixture(scope="module")
def sql_server(gold_lake: Lake) -> Iterator[Server]:
    """One SQL server for the module: beyond loopback, one user with a password, over TLS,
    results bounded to 8 MiB and statements to 20 s (a table's first read takes seconds on
    a busy machine)."""
    port = process.free_port()
    env = {
        **gold_lake.env,
        "LAKEHOUSE__SQL__HOST": "0.0.0.0",
        "LAKEHOUSE__SQL__USER": "analyst",
        "LAKEHOUSE__SQL__MAX_RESULT_BYTES": str(8 << 20),
        "LAKEHOUSE__SQL__QUERY_TIMEOUT_SECONDS": "20",
    }
    # Beyond loopback, a server that would admit anyone does not start.
    refused = run_lakehouse("sql-server", "--port", str(port), env=env, timeout=120)
    assert refused.returncode == 2
    assert refused.stderr.strip().endswith(
        "sql.user is 'analyst' but $LAKEHOUSE_SQL_PASSWORD is not set: the server would "
        "admit no one"
    )
    server = subprocess.Popen(
        lakehouse_command("sql-server", "--port", str(port)),
        env={**os.environ, **env, SQL_PASSWORD_ENV: PASSWORD},
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    output: list[str] = []
    try:
        deadline = time.monotonic() + 180
        while process.free(port):
            assert server.poll() is None, server.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the SQL server did not listen"
            time.sleep(0.5)
        tls = SelfSigned(gold_lake.settings.storage.local_state_dir / "sql" / "tls")
        yield Server(port, tls, output)
    finally:
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=60)
        output.extend([out, err])
    assert server.returncode == 0, err[-2000:]


def test_sql_server_answers_over_tls_and_refuses_each_hostile_statement_in_one_line(
    spark: SparkSession, gold_lake: Lake, sql_server: Server, tmp_path: Path
) -> None:
    allowed, hostile = corpus(gold_lake)
    bounded = {
        "SELECT sha2(string(id), 512) FROM range(400000)": "bigger than spark.driver.maxResultSize",
        "SELECT max(id % 7) FROM range(1000000000000)": "timed out",
    }
    script = tmp_path / "corpus.sql"
    statements = [*allowed, *(s for s, _ in hostile), *bounded, HOURLY]
    script.write_text("".join(f"{s};\n" for s in statements))

    ran = beeline(sql_server, tmp_path, "-f", str(script), "--force=true")

    lines = ran.stdout.splitlines() + ran.stderr.splitlines()
    errors = [line for line in lines if line.startswith("Error: ")]
    expected = [r for _, r in hostile] + list(bounded.values())
    assert len(errors) == len(expected), "\n".join(errors)
    for number, (error, refusal) in enumerate(zip(errors, expected, strict=True)):
        assert refused(error, refusal), (refusal, error)
        assert ("read-only: " in error) == (number < len(hostile)), error
    # beeline -f puts its prompt ("null" when silent) before each result's header
    lines = ran.stdout.splitlines()
    header = max(i for i, line in enumerate(lines) if line.endswith("sensor_id,hour,updates"))
    rows = list(csv.reader(itertools.takewhile(str.strip, lines[header + 1 :])))
    assert [[s, h[:19], u] for s, h, u in rows] == expected_hourly(spark)
    assert PROBE not in ran.stdout + ran.stderr
    for secret in (sql_server.tls.password(), PASSWORD):  # SET, SET -v, EXPLAIN, DESCRIBE
        assert secret not in ran.stdout + ran.stderr
    assert spark.catalog.tableExists("gold.sensor_hourly")


def test_sql_server_refuses_strangers_plain_text_and_settings_from_the_url(
    gold_lake: Lake, sql_server: Server, tmp_path: Path
) -> None:
    said = {
        "stranger": beeline(sql_server, tmp_path, "-e", "SELECT 1", password="guess"),
        "plain text": beeline(sql_server, tmp_path, "-e", "SELECT 1", tls=False),
        "url setting": beeline(
            sql_server,
            tmp_path,
            "-e",
            "SELECT 1",
            url_tail="?spark.sql.thriftServer.queryTimeout=0",
        ),
        "url variable": beeline(
            sql_server, tmp_path, "-e", "SELECT 1", url_tail="#spark.sql.variable.substitute=true"
        ),
        "script": whole_statement(
            sql_server, tmp_path, f"BEGIN SELECT java_method({JVM_CALL}); END"
        ),
    }

    assert all(r.returncode != 0 for r in said.values()), {
        n: r.stdout[-500:] + r.stderr[-1500:] for n, r in said.items() if r.returncode == 0
    }
    text = {name: r.stdout + r.stderr for name, r in said.items()}
    assert "Error validating the login" in text["stranger"]  # HiveServer2 tells no more
    assert "Could not open client transport" in text["plain text"], text["plain text"][-1500:]
    assert "from its connection's URL (spark.sql.thriftServer.queryTimeout)" in text["url setting"]
    assert "URL (spark.sql.variable.substitute)" in text["url variable"]
    assert "read-only: SQL scripting (BEGIN ... END) is refused" in text["script"], text["script"]
    assert PROBE not in "".join(text.values())


def whole_statement(
    server: Server, folder: Path, statement: str
) -> subprocess.CompletedProcess[str]:
    """One statement sent whole over JDBC, `;` and all, as BI tools send it."""
    secret = folder / "password"
    secret.write_text(PASSWORD)
    secret.chmod(0o600)
    jars = Path(pyspark.__file__).parent / "jars" / "*"
    client = Path(__file__).parents[1] / "jdbc" / "OneStatement.java"
    url = jdbc_url("127.0.0.1", server.port, server.tls)
    return subprocess.run(
        ["java", "-cp", str(jars), str(client), url, "analyst", str(secret), statement],
        capture_output=True,
        text=True,
        timeout=120,
    )


def beeline(
    server: Server,
    folder: Path,
    *args: str,
    password: str = PASSWORD,
    tls: bool = True,
    url_tail: str = "",
) -> subprocess.CompletedProcess[str]:
    home = Path(pyspark.__file__).parent
    secret = folder / "password"  # beeline -w: the password stays off beeline's command line
    secret.write_text(password)
    secret.chmod(0o600)
    url = jdbc_url("127.0.0.1", server.port, server.tls if tls else None) + url_tail
    login = ["-u", url, "-n", "analyst", "-w", str(secret)]
    return subprocess.run(
        [str(home / "bin" / "beeline"), *login, "--silent=true", "--outputformat=csv2", *args],
        env={**os.environ, "SPARK_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=300,
    )
