"""Gold tables by name from other Spark applications: `lakehouse sql` and the SQL server
queried with the beeline that ships with pyspark; both read-only unless told otherwise.

One corpus of hostile statements and one of what analysts ask go through `lakehouse sql`
(one application, `--continue`) and through beeline against one server, which listens
beyond loopback with a user, a password and TLS. The sessions clients open on that server
(URL settings, raw Thrift configurations, metadata calls) go through Hive's JDBC driver and
a Thrift client, one session per case (`tests/jdbc/Sessions.java`). The lake's applications
hold planted values (an environment variable, a system property, Hadoop and Spark settings)
that no answer may print."""

from __future__ import annotations

import csv
import itertools
import json
import os
import re
import secrets
import signal
import socket
import ssl
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
from lakehouse.ops.sql import jdbc_url
from lakehouse.runtime.incremental import run_models
from lakehouse.services import process
from lakehouse.services.tls import TRUSTSTORE_PASSWORD, SelfSigned
from silver import reconstruct
from tests.support import lakehouse_command, overrides, run_lakehouse, settings_for
from tests.support.gold import INCREMENTS, Bronze
from tests.support.sql_cases import ALLOWED, HOSTILE, SESSIONS, SETTABLE

pytestmark = pytest.mark.integration

HOURLY = "SELECT sensor_id, hour, updates FROM gold.sensor_hourly ORDER BY sensor_id, hour"
PROBE = f"probe-{secrets.token_hex(8)}"
"""A secret in the environment and in the application's Spark properties (a name Spark
redacts); the others, in a system property, a Hadoop and a Spark setting Spark does not."""
PROBE_PROPERTY, PROBE_SETTING, PROBE_TOKEN = (f"probe-{secrets.token_hex(8)}" for _ in range(3))
PROBES = (PROBE, PROBE_PROPERTY, PROBE_SETTING, PROBE_TOKEN)


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
    planted = {
        "spark.hadoop.fs.s3a.secret.key": PROBE,
        "spark.hadoop.lakehouse.probe.setting": PROBE_SETTING,
        "spark.lakehouse.probe.token": PROBE_TOKEN,
        "spark.driver.extraJavaOptions": f"-Dlakehouse.probe.property={PROBE_PROPERTY}",
    }
    env["LAKEHOUSE__SPARK__CONF"] = json.dumps(planted)
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
    shown = re.findall(r"^(spark\.\S+) +\|", ran.stdout, re.MULTILINE)  # SET, SET -v, SET key
    assert "spark.sql.session.timeZone" in shown and set(shown) <= SETTABLE, set(shown) - SETTABLE
    assert not [p for p in PROBES if p in ran.stdout + ran.stderr]
    lake = gold_lake.gold_path.removeprefix("file://").rsplit("/gold/", 1)[0]
    assert "PreparedDeltaFileIndex" in ran.stdout and lake not in ran.stdout  # EXPLAIN's too
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
    results bounded to 8 MiB and statements to 45 s (a table's first read took over 20 s
    beside the other worker's Spark jobs on a slow day)."""
    port = process.free_port()
    env = {
        **gold_lake.env,
        "LAKEHOUSE__SQL__HOST": "0.0.0.0",
        "LAKEHOUSE__SQL__USER": "analyst",
        "LAKEHOUSE__SQL__MAX_RESULT_BYTES": str(8 << 20),
        "LAKEHOUSE__SQL__QUERY_TIMEOUT_SECONDS": "45",
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
    assert not [p for p in PROBES if p in ran.stdout + ran.stderr]
    for secret in (sql_server.tls.password(), PASSWORD):  # SET, SET -v, EXPLAIN, DESCRIBE
        assert secret not in ran.stdout + ran.stderr
    assert spark.catalog.tableExists("gold.sensor_hourly")


def test_sql_server_refuses_each_session_that_carries_settings_or_names_another_database(
    gold_lake: Lake, sql_server: Server, tmp_path: Path
) -> None:
    cases = tmp_path / "sessions.tsv"
    cases.write_text("".join(f"{kind}\t{arg}\t{sql}\n" for kind, arg, sql, _ in SESSIONS))

    ran = sessions(sql_server, tmp_path, cases)

    assert ran.returncode == 0, ran.stderr[-3000:]
    said = [line.split("\t", 2) for line in ran.stdout.splitlines() if line[:1].isdigit()]
    assert len(said) == len(SESSIONS), ran.stdout[-3000:] + ran.stderr[-3000:]
    wrong = []
    for (kind, arg, statement, expected), (_, outcome, text) in zip(SESSIONS, said, strict=True):
        if expected.startswith("read-only: "):  # the client's one line, with the server's refusal
            right = outcome == "ERR" and refused(text, expected) and "\n" not in text
        else:
            right = outcome == ("ERR" if expected.startswith("ERR ") else "OK")
            right = right and bool(re.search(expected.removeprefix("ERR "), text))
        if not right:
            wrong.append((kind, arg, statement, outcome, text[-400:]))
    assert not wrong, "\n".join(map(str, wrong))
    assert not [p for p in PROBES if p in ran.stdout + ran.stderr]


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
def test_sql_server_speaks_tls_1_2_or_later_only_with_a_certificate_for_its_host(
    sql_server: Server,
) -> None:
    trusting = ssl.create_default_context(cafile=str(sql_server.tls.ca_file))
    address = ("127.0.0.1", sql_server.port)
    with (
        socket.create_connection(address, timeout=30) as raw,
        trusting.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.check_hostname, old.verify_mode = False, ssl.CERT_NONE
    old.set_ciphers("DEFAULT:@SECLEVEL=0")  # this client would speak TLS 1.1: the server not
    old.minimum_version = old.maximum_version = ssl.TLSVersion.TLSv1_1
    with (
        socket.create_connection(address, timeout=30) as raw,
        pytest.raises((ssl.SSLError, ConnectionError)),
    ):
        old.wrap_socket(raw).do_handshake()
    with socket.create_connection(address, timeout=30) as plain:
        plain.sendall(b"\x01\x00\x00\x00\x05PLAIN")  # Thrift SASL's start, in plain text
        answer = plain.recv(64)
    assert answer == b"" or answer[:1] == b"\x15", answer  # closed, or a TLS alert


def sessions(server: Server, folder: Path, cases: Path) -> subprocess.CompletedProcess[str]:
    """Each case a session of its own: Hive's JDBC driver, or a raw Thrift client."""
    secret = folder / "password"
    secret.write_text(PASSWORD)
    secret.chmod(0o600)
    jars = Path(pyspark.__file__).parent / "jars" / "*"
    client = Path(__file__).parents[1] / "jdbc" / "Sessions.java"
    url = jdbc_url("127.0.0.1", server.port, server.tls)
    tls = [str(server.tls.truststore), TRUSTSTORE_PASSWORD]
    login = ["127.0.0.1", str(server.port), *tls, "analyst", str(secret)]
    return subprocess.run(
        ["java", "-cp", str(jars), str(client), url, *login, str(cases)],
        capture_output=True,
        text=True,
        timeout=600,
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
