"""SQL on the lake by table name: `lakehouse sql` and `lakehouse sql-server`.

Both are Spark applications on the shared catalog, so they see the tables the streams and
gold jobs register, while those run. Both are read-only unless told otherwise: the
guard (`jvm/src/lakehouse/sql/ReadOnlyExtension.java`) analyzes each statement and lets it
run only if every node and expression of its analyzed plan is on an allow-list of what a
read of the lake's tables needs. It is switched on in the application's configuration,
which neither SET nor a JDBC client can change.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from lakehouse.core.console import echo
from lakehouse.core.errors import LakehouseError, SettingsError, explain
from lakehouse.core.settings import SQL_PASSWORD_ENV, SqlSettings, secret_set
from lakehouse.services import jars
from lakehouse.services.tls import TRUSTSTORE_PASSWORD, SelfSigned
from lakehouse.storage.catalog import LAYERS

FORMATS = ("table", "csv", "json")

LOCATION_PATTERN = r"(?i)\b(file|s3a?|s3n|hdfs|abfss?|gs|wasbs?):/[^\s,\])]*"
"""A file's URI in the text Spark prints of a plan, which it redacts."""

HIVE_RESTRICTED = (
    "hive.conf.restricted.list",
    "hive.variable.substitute",
    "hive.security.authenticator.manager",
    "hive.security.authorization.manager",
    "hive.security.authorization.enabled",
    "hive.users.in.admin.role",
    "hive.server2.authentication",
    "hive.server2.custom.authentication.class",
    "hive.server2.xsrf.filter.enabled",
)
"""Hive settings no session may change: the list itself, substitution and who is admitted."""


def session_conf(
    allow_writes: bool,
    sql: SqlSettings,
    server_port: int | None = None,
    tls: SelfSigned | None = None,
) -> dict[str, str]:
    """Spark properties of a SQL application: the guard, the bounds of one statement, and
    the server's address, who it admits and its TLS (`tls`: beyond loopback)."""
    conf = {
        "spark.sql.extensions": (
            f"io.delta.sql.DeltaSparkSessionExtension,{jars.SQL_EXTENSION_CLASS}"
        ),
        "spark.lakehouse.sql.readOnly": str(not allow_writes).lower(),
        "spark.lakehouse.sql.databases": ",".join(LAYERS),
        "spark.driver.extraClassPath": str(jars.sql_extension()),
        # A larger result fails the statement with a line; it is never cut short.
        "spark.driver.maxResultSize": str(sql.max_result_bytes),
        # The guard sees a statement as its author wrote it: Spark would replace ${env:X},
        # ${system:x} and ${spark.conf} with their values before any parser of ours runs.
        "spark.sql.variable.substitute": "false",
        # A script (BEGIN ... END) runs its statements without the parser: none are allowed.
        "spark.sql.scripting.enabled": "false",
        # Nothing beside the SQL port: the UI would serve every session's SQL text, with
        # kill links, over plain HTTP on every interface (Spark binds it to SPARK_LOCAL_IP).
        "spark.ui.enabled": "false",
        "spark.ui.killEnabled": "false",
        # EXPLAIN would print each scan's files (`Location: ...[file:/lake/gold/x]`).
        "spark.sql.redaction.string.regex": LOCATION_PATTERN,
    }
    if server_port is not None:
        # The server's handler threads load classes through the system class loader, which
        # sees only the driver's class path, never spark.jars: Delta must be on it too.
        classpath = [str(j) for j in jars.jars("spark")] + [str(jars.sql_extension())]
        conf["spark.driver.extraClassPath"] = os.pathsep.join(classpath)
        conf["spark.hadoop.hive.server2.thrift.bind.host"] = sql.host
        conf["spark.hadoop.hive.server2.thrift.port"] = str(server_port)
        conf["spark.sql.thriftServer.queryTimeout"] = f"{sql.query_timeout_seconds}s"
        # One line per refused or failed statement in the client, not a server stack trace.
        conf["spark.sql.hive.thriftServer.async"] = "false"
        # Hive would replace ${env:X}, ${system:x} and ${hiveconf:x} in the values of a
        # session's settings with the server's own; off, and on the list no client may change.
        conf["spark.hadoop.hive.variable.substitute"] = "false"
        conf["spark.hadoop.hive.conf.restricted.list"] = ",".join(HIVE_RESTRICTED)
        conf["spark.hadoop.hive.ssl.protocol.blacklist"] = "SSLv2,SSLv2Hello,SSLv3,TLSv1,TLSv1.1"
        conf.update(admission(sql))
        if tls is not None:
            conf.update(
                {
                    "spark.hadoop.hive.server2.use.SSL": "true",
                    "spark.hadoop.hive.server2.keystore.path": str(tls.keystore),
                    # A secret by its name: sent to the JVM through py4j, never an argument.
                    "spark.hadoop.hive.server2.keystore.password": tls.password(),
                }
            )
    return conf


def server_tls(sql: SqlSettings, local_state: Path) -> SelfSigned | None:
    """The SQL server's key and certificate beyond loopback, made at its first start; on
    loopback it speaks plain text to the clients of this machine."""
    if sql.loopback:
        return None
    return SelfSigned(local_state / "sql" / "tls").ensure("sql-server", sql.host)


def jdbc_url(host: str, port: int, tls: SelfSigned | None, database: str = "gold") -> str:
    """How beeline (Hive's JDBC driver) reaches the server, trusting its certificate."""
    url = f"jdbc:hive2://{host}:{port}/{database}"
    if tls is not None:
        url += f";ssl=true;sslTrustStore={tls.truststore};trustStorePassword={TRUSTSTORE_PASSWORD}"
    return url


def admission(sql: SqlSettings) -> dict[str, str]:
    """Whom the server admits: anyone who reaches it on loopback, or the one user of
    `sql.user` with the password in the server's environment."""
    if not sql.user:
        if not sql.loopback:
            raise SettingsError(
                f"sql.host: refusing to serve SQL on {sql.host} to anyone who reaches it; "
                f"set sql.user and ${SQL_PASSWORD_ENV} to admit one user, or keep sql.host "
                "127.0.0.1"
            )
        return {}
    if not secret_set(SQL_PASSWORD_ENV):
        raise SettingsError(
            f"sql.user is {sql.user!r} but ${SQL_PASSWORD_ENV} is not set: the server "
            "would admit no one"
        )
    return {"spark.hadoop.hive.server2.authentication": "CUSTOM"}


def authenticator_properties(sql: SqlSettings) -> dict[str, str]:
    """The JVM system property HiveServer2 finds its CUSTOM authenticator by (it reads a
    configuration of its own at each login, not the server's):
    `jvm/src/lakehouse/sql/PasswordAuthenticator.java`, told its user once at start, which
    reads the password from the server's environment itself, so that it is never a Spark
    property or an argument."""
    if not sql.user:
        return {}
    return {"hive.server2.custom.authentication.class": "lakehouse.sql.PasswordAuthenticator"}


def split_statements(text: str) -> list[str]:
    """The statements of a script, split at `;` outside quotes and `--` comments."""
    statements, current, quote = [], [], ""
    i = 0
    while i < len(text):
        char = text[i]
        if quote:
            current.append(char)
            if char == quote:
                quote = ""
        elif char in "'\"`":
            quote = char
            current.append(char)
        elif text.startswith("--", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        elif char == ";":
            statements.append("".join(current).strip())
            current = []
        else:
            current.append(char)
        i += 1
    statements.append("".join(current).strip())
    return [s for s in statements if s]


def run_statements(
    spark: SparkSession,
    statements: list[str],
    fmt: str = "table",
    max_rows: int = 1000,
    out: Callable[[str], None] = print,
    keep_going: bool = False,
) -> None:
    """Run each statement and print its result in `fmt`; stop at the first that fails, or
    with `keep_going` say each failure in a line and fail at the end."""
    # PySpark logs a failed statement as a JSON record with the JVM stack; the error
    # raised below says it in one line.
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    failed = 0
    for number, statement in enumerate(statements, 1):
        try:
            frame = spark.sql(statement)
            rows = frame.limit(max_rows + 1).collect() if fmt == "table" else frame.collect()
        except Exception as error:
            where = f"statement {number}: " if len(statements) > 1 else ""
            if not keep_going:
                raise LakehouseError(f"{where}{explain(error)}") from None
            echo(f"lakehouse: error: {where}{explain(error)}", err=True)
            failed += 1
            continue
        if number > 1 and fmt == "table":
            out("")
        for line in render(frame.columns, rows[:max_rows] if fmt == "table" else rows, fmt):
            out(line)
        if fmt == "table" and len(rows) > max_rows:
            out(f"(first {max_rows:,} rows shown; --max-rows to see more)")
    if failed:
        raise LakehouseError(f"{failed} of {len(statements)} statements failed")


def render(columns: list[str], rows: list[Any], fmt: str) -> Iterator[str]:
    """Rows as an aligned text table, CSV with a header, or JSON Lines."""
    if fmt == "json":
        for row in rows:
            yield json.dumps({c: _plain(v) for c, v in zip(columns, row, strict=True)}, default=str)
        return
    cells = [[_text(v) for v in row] for row in rows]
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(cells)
        yield from buffer.getvalue().splitlines()
        return
    if not columns:
        yield "OK"
        return
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    numeric = [
        all(_is_number(row[i]) for row in rows if row[i] is not None) for i in range(len(columns))
    ]
    yield " | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))
    yield "-+-".join("-" * w for w in widths)
    for row in cells:
        yield " | ".join(
            v.rjust(w) if right else v.ljust(w)
            for v, w, right in zip(row, widths, numeric, strict=True)
        )
    yield f"({len(rows):,} row{'s' if len(rows) != 1 else ''})"


def serve(spark: SparkSession, sql: SqlSettings, stop: threading.Event) -> None:
    """Run Spark's Thrift JDBC/ODBC server on this application until `stop` is set, behind
    the door that judges what a client opens a session with
    (`jvm/src/lakehouse/sql/GuardedThriftServer.java`)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    for key, value in authenticator_properties(sql).items():
        jvm.java.lang.System.setProperty(key, value)
    try:
        if sql.user:
            jvm.lakehouse.sql.PasswordAuthenticator.admit(sql.user)
        server = jvm.lakehouse.sql.GuardedThriftServer.start(spark._jsparkSession)
    except Exception as error:
        raise LakehouseError(f"the SQL server could not start: {explain(error)}") from None
    try:
        stop.wait()
    finally:
        server.stop()


def _text(value: Any) -> str:
    if value is None:
        return "NULL"
    plain = _plain(value)
    return plain if isinstance(plain, str) else json.dumps(plain, default=str)


def _plain(value: Any) -> Any:
    """A cell as JSON-ready Python: rows and maps as objects, times as ISO strings."""
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, datetime | date):
        return value.isoformat(sep=" ") if isinstance(value, datetime) else value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return value.hex()
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)
