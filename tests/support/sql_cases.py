"""What the SQL tests send (tests/integration/test_sql.py) and what each must be answered:
hostile statements, the statements analysts run, the settings a statement may set, and the
sessions clients open."""

from __future__ import annotations

READS = "downstream SQL reads the lake's tables by name"
BY_PATH = f"by path is refused; {READS}"
NOT_A_VALUE_FUNCTION = "is not allowed in downstream SQL: only built-in functions that compute"
WRITES = "changes data or the catalog, or reaches beyond the lake; rerun with --allow-writes"
OUTSIDE = "is outside the lake's"
JVM_CALL = "'java.lang.System', 'getenv', 'PROBE_SECRET'"
MEMORY = "so that one value cannot take the server's memory"
BEFORE = "Spark evaluates it before the statement is judged"
FILES = "is refused like input_file_name\\(\\): it says where the lake's files are"
PARTITIONS = "partitions is refused: one statement may ask for at most 1000"
COLLECTS = "is refused: its state grows with the rows it reads"

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
    ("DESCRIBE DETAIL '{gold}'", FILES),
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
    ("SHOW TABLE EXTENDED IN default LIKE '*'", f"the database default {OUTSIDE}"),
    ("SHOW VIEWS IN default", f"the database default {OUTSIDE}"),
    ("SHOW COLUMNS IN outside IN default", OUTSIDE),
    ("DESCRIBE DATABASE default", f"DESCRIBE NAMESPACE .*{FILES}"),
    ("DESCRIBE DATABASE gold", f"DESCRIBE NAMESPACE .*{FILES}"),
    # where the lake's files are
    ("SELECT _metadata.file_path FROM gold.sensor_daily", "_metadata is refused like input_file"),
    ("SELECT _metadata FROM gold.sensor_hourly", "refused like input_file_name()"),
    ("DESCRIBE TABLE EXTENDED gold.sensor_hourly", f"EXTENDED {FILES}"),
    ("DESCRIBE DETAIL gold.sensor_daily", FILES),
    ("SHOW CREATE TABLE gold.plain", FILES),  # parquet: of a Delta table, Delta refuses it
    ("SHOW TABLE EXTENDED IN gold LIKE '*'", f"EXTENDED {FILES}"),
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
    ("SET spark.hadoop.fs.s3a.secret.key", "SET spark.hadoop.fs.s3a.secret.key is refused: a"),
    ("SET spark.lakehouse.probe.token", "a session may see and set only"),
    ("SET spark.hadoop.lakehouse.probe.setting", "a session may see and set only"),
    ("SET spark.sql.session.timeZone=${env:PROBE_SECRET}", "${...} is refused"),
    ("SET spark.sql.session.timeZone=Nowhere/Else", "may be a time zone such as UTC, not the"),
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
    ("SELECT replace(repeat('x', 100000), 'x', repeat('y', 1000))", "in one expression"),
    (f"SELECT replace(string(id), '1', '{'y' * 2000}') FROM range(3)", f"replace is .*{MEMORY}"),
    ("SELECT array_insert(array(1), 2000000000, 1)", f"its position is 2,000,000,000.*{MEMORY}"),
    ("SELECT format_number(1.5, 2000000000)", "decimal places is 2,000,000,000"),
    ("SELECT aggregate(sequence(1, 40), 'x', (a, x) -> concat(a, a))", "concat in aggregate's"),
    # what Spark evaluates while it analyzes a statement, judged before
    ("SELECT * FROM VALUES (repeat('x', 2000000000)) AS v(x)", f"repeat in VALUES .*{BEFORE}"),
    (f"SELECT * FROM VALUES (java_method({JVM_CALL})) AS v(x)", "the function java_method"),
    ("SELECT * FROM VALUES (IDENTIFIER('java' || '_method')('x', 'y')) AS v(x)", BEFORE),
    ("SELECT * FROM range(3) LIMIT length(repeat('x', 2000000000))", f"repeat in LIMIT .*{BEFORE}"),
    ("SELECT * FROM range(3) OFFSET length(space(2000000000))", "space in OFFSET"),
    ("SELECT * FROM range(length(repeat('x', 2000000000)))", "repeat in a table function's"),
    (
        "SELECT count(*) FROM gold.sensor_daily TIMESTAMP AS OF repeat('2', 2000000000)",
        "repeat in TIMESTAMP AS OF",
    ),
    (f"EXECUTE IMMEDIATE 'SELECT 1' USING java_method({JVM_CALL})", "the function java_method"),
    # a server's worth of work from one statement
    ("SET spark.sql.shuffle.partitions=100000", "shuffle.partitions may be 1 to 1000, not"),
    ("SELECT count(*) FROM range(0, 10, 1, 20000)", f"range's slices of 20,000 {PARTITIONS}"),
    ("SELECT /*+ REPARTITION(100000) */ * FROM range(3)", f"REPARTITION .*{PARTITIONS}"),
    ("SELECT /*+ COALESCE(5000) */ * FROM range(3)", PARTITIONS),
    ("SELECT stack(5000000, 1)", "stack of 5,000,000 rows from 1 values is refused"),
    (
        "WITH RECURSIVE r(n) MAX RECURSION LEVEL 1000000 AS (SELECT 1 UNION ALL SELECT n + 1 "
        "FROM r WHERE n < 3) SELECT * FROM r",
        "MAX RECURSION LEVEL 1000000 is refused",
    ),
    (
        "WITH RECURSIVE r(s) AS (SELECT 'x' UNION ALL SELECT concat(s, s) FROM r "
        "WHERE length(s) < 100) SELECT max(length(s)) FROM r",
        "concat in a recursive CTE's step is refused",
    ),
    ("SELECT collect_list(id) FROM range(10)", f"collect_list .*{COLLECTS}"),
    ("SELECT string_agg(string(id), ',') FROM range(10)", COLLECTS),
    ("SELECT median(id) FROM range(10)", COLLECTS),
    ("SELECT count_min_sketch(id, 0.0000001d, 0.9d, 1) FROM range(10)", COLLECTS),
]
"""Each statement and (a regular expression of) its one-line refusal after `read-only: `."""

SETTABLE = {
    "spark.sql.session.timeZone",
    "spark.sql.ansi.enabled",
    "spark.sql.shuffle.partitions",
    "spark.sql.adaptive.enabled",
    "spark.sql.legacy.timeParserPolicy",
    "spark.sql.caseSensitive",
    "spark.sql.timestampType",
    "spark.sql.datetime.java8API.enabled",
    "spark.sql.decimalOperations.allowPrecisionLoss",
}
"""What a session may see and set (`jvm/src/lakehouse/sql/ClientSettings.java`)."""

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
    "DESCRIBE TABLE gold.sensor_hourly",
    "DESCRIBE HISTORY gold.sensor_hourly",
    "SHOW TABLES IN gold",
    "SHOW DATABASES",
    "EXPLAIN SELECT * FROM gold.sensor_hourly",
    "USE gold",
    "SET spark.sql.session.timeZone=UTC",
    "SET",
    "SET -v",
    "SET spark.sql.session.timeZone",
    "SELECT * FROM VALUES (1, 'a', DATE'2026-01-01', array(1, 2)) AS v(n, s, d, a) LIMIT 1 + 1",
    "SELECT approx_percentile(updates, 0.5), format_number(1234.5, 2) FROM gold.sensor_daily",
    "SELECT * FROM range(0, 10, 1, 4) DISTRIBUTE BY id LIMIT 3",
    "CREATE TEMPORARY VIEW busy AS SELECT * FROM gold.sensor_hourly WHERE updates > 5",
    "SELECT count(*) FROM busy",
    "SELECT count(*) FROM gold.busy_hours",
    "SHOW DATABASES LIKE 'g*'",
    "DROP VIEW busy",
]


AT_OPEN = "read-only: the session was refused, with nothing of it applied: "
NOT_CARRIED = f"{AT_OPEN}.* is not a setting a client may carry"
NO_ZONE = f"{AT_OPEN}spark.sql.session.timeZone may be a time zone such as UTC, not the value"
OTHER_DATABASE = "read-only: metadata of 'default' is refused: it names none of the lake's"
LAKE_ONLY = r"^[1-9]\d* rows of ((bronze|gold|ops|quality|silver)(,|$))+$"


def substituted(name: str) -> str:
    """`${name}` as a JDBC URL carries it (its parser refuses `$` and braces)."""
    return f"%24%7B{name}%7D"


SUBSTITUTIONS = [
    "env:PROBE_SECRET",
    "system:lakehouse.probe.property",
    "hiveconf:javax.jdo.option.ConnectionURL",
    "hivevar:x",
    "spark.lakehouse.probe.token",
]
SESSIONS = [
    # every substitution prefix, in the URL's ?-settings and #-variables
    *[
        ("url", f"{part}spark.sql.session.timeZone={substituted(name)}", "SELECT 1", NO_ZONE)
        for part in "?#"
        for name in SUBSTITUTIONS
    ],
    # every Hive session setting, and settings no session may carry
    (
        "url",
        f"#hive.server2.custom.authentication.class={substituted('env:PATH')}",
        "SET hive.server2.custom.authentication.class",
        f"{AT_OPEN}SET hive.server2.custom.authentication.class is refused",
    ),
    ("url", "?hive.server2.custom.authentication.class=x", "SELECT 1", f"{AT_OPEN}SET hive"),
    ("url", "?hive.variable.substitute=true", "SELECT 1", f"{AT_OPEN}SET hive.variable"),
    ("url", "?hive.conf.restricted.list=x", "SELECT 1", f"{AT_OPEN}SET hive.conf.restricted"),
    ("url", ";fetchSize=100000000", "SELECT 1", f"{AT_OPEN}hive.server2.thrift.resultset"),
    ("url", ";hive.server2.proxy.user=root", "SELECT 1", NOT_CARRIED),
    ("url", "?spark.sql.shuffle.partitions=100000", "SELECT 1", f"{AT_OPEN}spark.sql.shuffle"),
    ("url", "?spark.sql.thriftServer.queryTimeout=0", "SELECT 1", f"{AT_OPEN}SET spark.sql.th"),
    ("url", "#spark.sql.variable.substitute=true", "SELECT 1", f"{AT_OPEN}SET spark.sql.var"),
    ("url", "/default", "SELECT 1", f"{AT_OPEN}connect to one of the lake's databases"),
    # raw Thrift sessions, as no JDBC driver opens them
    ("raw", "set:system:lakehouse.raw.probe=RAWPROBE77", "", NOT_CARRIED),
    ("raw", "set:metaconf:hive.metastore.client.socket.timeout=1", "", NOT_CARRIED),
    ("raw", "set:env:PATH=/tmp", "", NOT_CARRIED),
    ("raw", "hive.server2.authentication=NONE", "", NOT_CARRIED),
    ("raw", "use:database=gold;;set:hiveconf:x=${env:PROBE_SECRET}", "", f"{AT_OPEN}SET x"),
    ("raw", "use:database=gold;;set:hivevar:spark.sql.session.timeZone=UTC", "", "^opened$"),
    # metadata calls, which never pass the parser
    *[("meta", call, "default", OTHER_DATABASE) for call in ("tables", "columns", "functions")],
    ("meta", "schemas", "default", OTHER_DATABASE),
    ("meta", "keys", "default", OTHER_DATABASE),
    ("meta", "tables", "%", LAKE_ONLY),
    ("meta", "schemas", "", LAKE_ONLY),
    # statements sent whole, as BI tools send them; then the server still admits and answers
    ("url", "", f"BEGIN SELECT java_method({JVM_CALL}); END", "read-only: SQL scripting"),
    ("url", "?spark.sql.session.timeZone=UTC", "SET spark.sql.session.timeZone", ",UTC$"),
    ("url", "", "SET -v", "^spark.sql.adaptive.enabled,(true|false),When true, enable"),
    ("password", "guess", "SELECT 1", "ERR .*Error validating the login"),
    ("url", "", "SELECT 'still answering'", "^still answering$"),
]
"""Each session a client opens, and what it is answered: a refusal at `read-only: `, or
`ERR` and a regular expression of the client's error, or a regular expression of the answer."""
