"""The one place a SparkSession is built: Delta, the Kafka connector, RocksDB state and the
shared catalog."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import threading
import time
import zipfile
from importlib import import_module
from pathlib import Path

from pyspark import SparkConf, SparkContext
from pyspark.errors import PySparkRuntimeError
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from lakehouse import PROJECT_ROOT
from lakehouse.core.console import divert, echo
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings
from lakehouse.runtime import class_data
from lakehouse.services import Reached, jars, reached
from lakehouse.storage.lease import s3a_timeout_s

LOG_CONFIG = Path(__file__).with_name("log4j2.properties")
PACKAGES = ("lakehouse", "bronze", "silver", "gold")
"""What executors import: shipped to them as one zip on a cluster."""
CLASS_PATH = "spark.driver.extraClassPath"
TRACE_FILE = "spark.lakehouse.traceFile"
"""The application's log (`log_file`): Spark's log4j lines, among them the whole trace of a
failed query that the console reports in one line (log4j2.properties)."""


WORKER_PYTHON = os.environ.get("PYSPARK_PYTHON", sys.executable)
"""Python workers' interpreter unless a target names one: read once, because building a
session on the embedded cluster sets PYSPARK_PYTHON to its executors' (which lacks the
project) for the rest of the process."""

STATE_FORMAT = "spark.sql.streaming.stateStore.checkpointFormatVersion"
ROW_CHECKSUMS = "spark.sql.streaming.stateStore.rowChecksum.enabled"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
CODEGEN_CACHE = "spark.sql.codegen.cache.maxEntries"


SECRET = re.compile(r"(?i)secret|password|token|access[.]?key")
"""Names of Spark properties that hold a secret, as Spark's own redaction knows them."""
_SECRET_IN_VALUE = re.compile(r"(?i)(?:secret|password|token)=")
"""A secret inside a value: a metastore URL's `password=`."""


STATE_STORE = {
    # RocksDB keeps large session state off the JVM heap, and the transformWithState
    # family refuses any other provider; it cannot be changed on an existing checkpoint.
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
    # Checkpoints with unique ids per state version: in format 1 a job killed while
    # uploading a state version was seen to restore wrong state on restart, silently
    # (tests/integration/test_faults.py). A checkpoint keeps the format it was begun in.
    STATE_FORMAT: "2",
    # ... and bounded: one block cache and write buffer budget for every state store
    # instance of the JVM, rather than per instance, so that the process's memory beyond
    # the heap does not grow with the number of shuffle partitions.
    "spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage": "true",
    "spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB": "256",
    # A checksum on every state row (Spark 4.2), checked whenever state is loaded from
    # the checkpoint: a corrupt state file stops the stream rather than rebuilding
    # sessions from wrong rows. A checkpoint keeps the choice it was begun with, so one
    # begun before 4.2 runs on without (docs/operations.md, "Upgrading the platform").
    ROW_CHECKSUMS: "true",
    # Each state version's changes as a file beside the snapshots: what Spark 4.2's
    # snapshot repair (on by default) replays from an older snapshot when the latest
    # will not load. An existing checkpoint may turn it on or off.
    CHANGELOG: "true",
}
"""How every stateful stream keeps its state (silver's sessions)."""


def secret(key: str, value: str) -> bool:
    """Whether a Spark property holds a secret, to keep off the command line of the JVM
    `start_jvm` launches (a jar's name may hold `token`: its value is not judged whole)."""
    return bool(SECRET.search(key) or _SECRET_IN_VALUE.search(value))


DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"


def build_spark(
    settings: Settings, app_name: str | None = None, extra: dict[str, str] | None = None
) -> SparkSession:
    """A session with the project's pinned jars and catalog; `getOrCreate` reuses one in this
    process. `extra` adds spark.* properties a command needs (the SQL server's port)."""
    spark_settings = settings.spark
    app = app_name or spark_settings.app_name
    log = log_file(settings, app)
    services = reached(settings)
    conf = spark_conf(settings, services, log, extra)
    if services.executor_python:
        conf["spark.pyspark.python"] = services.executor_python
    conf.update({"spark.master": services.master, "spark.app.name": app})
    # Python workers must run this interpreter, which has pandas and pyarrow; PySpark takes
    # the worker interpreter from the driver's environment, not from spark.* settings. A
    # cluster target names its executors' interpreter with spark.pyspark.python.
    python = conf.get("spark.pyspark.python") or WORKER_PYTHON
    os.environ["PYSPARK_PYTHON"] = python
    archive = class_data.archive_of(spark_settings.class_data_dir, conf, DRIVER_JAVA_OPTIONS)
    option, written = class_data.java_option(archive) if archive else ("", None)
    conf[DRIVER_JAVA_OPTIONS] = f"{conf[DRIVER_JAVA_OPTIONS]} {option}".rstrip()
    jvm = start_jvm(conf, log)
    if jvm is not None and archive is not None and written is not None:
        class_data.keep_when_written(jvm, written, archive)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(spark_settings.log_level)
    if not services.master.startswith("local"):
        # Executors get the project as a real cluster's would: shipped by the driver.
        spark.sparkContext.addPyFile(str(project_zip()))
    return spark


def spark_conf(
    settings: Settings, services: Reached, log: Path, extra: dict[str, str] | None
) -> dict[str, str]:
    """The session's spark.* settings: the project's, then the catalog's, S3's, the
    target's (`spark.conf`) and the command's `extra`, later ones winning."""
    spark_settings = settings.spark
    conf = {
        "spark.jars": ",".join(str(j) for j in (*jars.jars("spark"), jars.sql_extension())),
        "spark.driver.memory": spark_settings.driver_memory,
        DRIVER_JAVA_OPTIONS: f"-Dlog4j2.configurationFile={LOG_CONFIG.as_uri()} "
        f"-D{TRACE_FILE}={log}",
        TRACE_FILE: str(log),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.shuffle.partitions": str(spark_settings.shuffle_partitions),
        **STATE_STORE,
        "spark.sql.session.timeZone": "UTC",
        # Spark keeps the classes it generates for 100 plans (by their source) and compiles
        # again any plan it evicted. One silver batch runs about 136 plans (its stream,
        # MERGEs, appends, checks, Delta's snapshots), so with 100 every batch compiled
        # about 240 classes anew, and the JVM compiled them again; with room for them all,
        # a steady batch compiles none (docs/benchmarks.md).
        CODEGEN_CACHE: "1000",
        # `run all` gives each part a scheduler pool of its own (runtime/supervise.py): FAIR
        # shares the cores among them. Spark's default (FIFO) ignores pools and gives the
        # cores to the oldest job's tasks first: a large gold job held the streams back.
        "spark.scheduler.mode": "FAIR",
        # Jobs print one line per batch; Spark's progress bars would interleave with them.
        "spark.ui.showConsoleProgress": "false",
        # pandas deprecation notices from inside PySpark's own serializers, once per task.
        "spark.executorEnv.PYTHONWARNINGS": "ignore::FutureWarning",
    }
    catalog, s3 = catalog_conf(settings, services.metastore), s3a_conf(settings, services)
    for more in (catalog, s3, spark_settings.conf, extra or {}):
        for key, value in more.items():
            # Class paths add up (the metastore's driver and a command's own jars), and so
            # do the driver JVM's options (a command's own beside the log's).
            if key == CLASS_PATH and key in conf:
                value = f"{conf[key]}{os.pathsep}{value}"
            elif key == DRIVER_JAVA_OPTIONS and key in conf:
                value = f"{conf[key]} {value}"
            conf[key] = value
    return conf


def log_file(settings: Settings, app: str) -> Path:
    """Where an application's JVM writes everything it prints: one file per application
    name, appended to by each run."""
    return settings.storage.local_state_dir / "logs" / f"{app}.log"


def start_jvm(conf: dict[str, str], log: Path) -> subprocess.Popen[bytes] | None:
    """Launch this process's Spark driver JVM, as `getOrCreate` would, but with its output
    in `log`: log4j's lines, what the JVM and libraries print themselves (the incubator
    module notice, VACUUM's counts) and the stderr of the Python workers it forks. A JVM
    runs once per process; a second session reuses it, and its log. The JVM's process if
    this call started it."""
    with SparkContext._lock:
        if SparkContext._gateway is not None:
            return None
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            # Runs of the same application share the file: each begins with a line that
            # says when and which process.
            started = time.strftime("%Y-%m-%d %H:%M:%S")
            out.write(f"\n==== {started} pid {os.getpid()}: {' '.join(sys.argv)}\n".encode())
            out.flush()
            # Secrets reach the JVM later, through py4j, with the rest of the session's
            # settings: the command that starts it is in `ps` for every user to read.
            public = [(k, v) for k, v in conf.items() if not secret(k, v)]
            try:
                gateway = launch_gateway(
                    SparkConf(loadDefaults=False).setAll(public),
                    popen_kwargs={"stdout": out, "stderr": out},
                )
            except PySparkRuntimeError:
                raise LakehouseError(f"Spark's JVM did not start; see {log}") from None
        SparkContext._gateway = gateway
        SparkContext._jvm = gateway.jvm
        return gateway.proc


def session_for(
    settings: Settings, app: str, extra: dict[str, str] | None = None, validates: bool = False
) -> SparkSession:
    """A Spark application named `lakehouse-<app>`, whose log (Spark's, the JVM's, Python's
    warnings) is named once on the console. `validates`: the command runs Great
    Expectations (a walk of the graph, its checks or its report)."""
    name = f"lakehouse-{app}"
    log = log_file(settings, name)
    echo(f"Spark log: {log}", err=True)
    divert(log)
    if not validates:
        return build_spark(settings, app_name=name, extra=extra)
    # Great Expectations takes ~3 s of Python to import, and the JVM as long to start in a
    # process of its own: while this thread waits for the JVM, another imports.
    importing = threading.Thread(target=import_module, args=("great_expectations",), daemon=True)
    importing.start()
    spark = build_spark(settings, app_name=name, extra=extra)
    importing.join()
    return spark


def project_zip() -> Path:
    """The project's packages as one zip for `addPyFile`, rebuilt when a file changes."""
    files = sorted(
        path
        for package in PACKAGES
        for path in (PROJECT_ROOT / package).rglob("*")
        if path.suffix in (".py", ".properties") and "__pycache__" not in path.parts
    )
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(PROJECT_ROOT)).encode() + path.read_bytes())
    target = jars.JARS_DIR.parent / "dist" / f"lakehouse-{digest.hexdigest()[:12]}.zip"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in files:
                archive.write(path, path.relative_to(PROJECT_ROOT))
        partial.replace(target)
    return target


def s3a_conf(settings: Settings, services: Reached) -> dict[str, str]:
    """Hadoop's S3A settings from the `s3` settings, when the lake is on S3."""
    if not settings.storage.root.startswith("s3a://"):
        return {}
    s3 = settings.s3
    # A request S3 leaves unanswered fails in time for its writer's lease (storage/lease.py).
    hung = f"{s3a_timeout_s(settings.storage.lease_seconds):.0f}s"
    conf = {
        "spark.hadoop.fs.s3a.endpoint.region": s3.region,
        "spark.hadoop.fs.s3a.path.style.access": str(s3.path_style).lower(),
        "spark.hadoop.fs.s3a.connection.establish.timeout": hung,
        "spark.hadoop.fs.s3a.connection.timeout": hung,
        # Hadoop 3.5 reads through its analytics stream by default; the lake was proven on
        # S3-compatible servers (SeaweedFS, MinIO) with the classic one.
        "spark.hadoop.fs.s3a.input.stream.type": "classic",
    }
    if services.s3_endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = services.s3_endpoint
    access_key, secret_key = services.s3_keys
    if access_key:
        conf["spark.hadoop.fs.s3a.access.key"] = access_key
        conf["spark.hadoop.fs.s3a.secret.key"] = secret_key
    return conf


def catalog_conf(settings: Settings, metastore: str) -> dict[str, str]:
    """Spark properties that put the session on the shared catalog `metastore` (the
    settings' `catalog.metastore`, an embedded one resolved)."""
    if metastore == "none":
        return {"spark.sql.catalogImplementation": "in-memory"}
    conf = {
        "spark.sql.catalogImplementation": "hive",
        # Databases are created without a location; keep their folders inside the lake.
        "spark.sql.warehouse.dir": f"{settings.storage.root}/_warehouse",
    }
    if metastore.startswith("thrift://"):
        return {**conf, "spark.hadoop.hive.metastore.uris": metastore}
    if not metastore.startswith("jdbc:"):
        raise LakehouseError(
            f"catalog.metastore {metastore!r} is none of embedded, none, thrift://…, jdbc:…"
        )
    conf.update(
        {
            "spark.hadoop.javax.jdo.option.ConnectionURL": metastore,
            # The schema exists (lakehouse setup made it, or the metastore's owner did);
            # creating or validating it from every application takes a minute.
            "spark.hadoop.datanucleus.schema.autoCreateAll": "false",
            "spark.hadoop.hive.metastore.schema.verification": "false",
        }
    )
    if metastore.startswith("jdbc:derby://"):
        from lakehouse.services.metastore import CLIENT_DRIVER, client_classpath

        conf["spark.hadoop.javax.jdo.option.ConnectionDriverName"] = CLIENT_DRIVER
        conf[CLASS_PATH] = client_classpath()
    return conf
