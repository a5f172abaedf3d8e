"""Helpers for tests: settings and CLI runs pointed at a test's own folder and topics.

The package's modules hold what more than one test module uses: no test module imports
another."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from lakehouse import PROJECT_ROOT
from lakehouse.core.settings import Settings, load_settings
from lakehouse.observe.lineage import EVENTS_FILE

S3_KEYS = ("lakehouse", "s3-lake-secret")
"""Access and secret key of the tests' S3 servers."""

METASTORE_ENV = "LAKEHOUSE__CATALOG__METASTORE"
"""Set by the `metastore` fixture for the whole run: every test shares its catalog."""

INTERPRETED_PLANS = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}
"""Spark settings under which it interprets every plan rather than generating and compiling
classes for it (Spark's own tests use the second). The tests' plans run on a few hundred
rows, where compiling a plan costs more than running it: the CLI runs take four runs in
0.85 of the time (`python -m benchmarks.cli_runs`), and the test process's own Spark ran
`test_sessions.py` in 0.88 (docs/testing.md). The claims that a job's result equals an
independent computation also run on the plans as deployed (`compiled_plans`). Never the
deployed settings: a long-lived job on real data wants its code."""

DEPLOYED_PLANS = {
    "spark.sql.codegen.wholeStage": "true",
    "spark.sql.codegen.factoryMode": "FALLBACK",
}
"""Spark's own values of `INTERPRETED_PLANS`' settings, as the deployed jobs run."""

CLI_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m " + " ".join(
    f"-D{key}={value}" for key, value in INTERPRETED_PLANS.items()
)
"""The JVM of each CLI run compiles with C1 alone: it lives seconds to minutes on little
data, where C2's compiling costs more than it wins back (a run ~18% faster,
docs/testing.md). C1 alone shrinks the code cache to 48 MB, which a long `run all` was
seen to fill; 240 MB is the JVM's usual size. Its Spark interprets every plan
(`INTERPRETED_PLANS`, as system properties, which Spark reads as settings). The test
process's own JVM keeps C2: it runs for the whole suite. Never the deployed settings."""


@contextmanager
def compiled_plans(spark: SparkSession) -> Iterator[None]:
    """The test process's Spark generates and compiles code for its plans, as deployed, while
    in the block: for the claims that a job's result equals an independent computation."""
    for key, value in DEPLOYED_PLANS.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in INTERPRETED_PLANS.items():
            spark.conf.set(key, value)


CDS_DIR = PROJECT_ROOT / ".state" / "cds"
"""The class-data archives of the CLI runs' JVMs, made by `make test` before pytest
(`tests/support/cds.py`) by the product's own means (`spark.class_data_dir`): each JVM maps
the classes a run loads rather than reading, parsing and verifying them again, and a run
ends ~4 s sooner (docs/testing.md). Without them, runs write none (`none`): a run's JVM
would spend seconds writing one as it exits."""


def overrides(storage_root: Path, bootstrap: str, topic_prefix: str, **keys: str) -> dict[str, str]:
    """Environment variables that isolate a run; `keys` like bronze__trigger_interval="1 second"."""
    env = {
        "LAKEHOUSE__STORAGE__ROOT": str(storage_root / "lake"),
        "LAKEHOUSE__STORAGE__LOCAL_STATE": str(storage_root / "state"),
        "LAKEHOUSE__QUALITY__LOCAL_DIR": str(storage_root / "quality"),
        "LAKEHOUSE__KAFKA__BOOTSTRAP_SERVERS": bootstrap,
        "LAKEHOUSE__KAFKA__TOPIC_PREFIX": topic_prefix,
        "LAKEHOUSE__KAFKA__PARTITIONS": "2",
        "LAKEHOUSE__SPARK__MASTER": "local[2]",
        "LAKEHOUSE__SPARK__SHUFFLE_PARTITIONS": "2",
        "JDK_JAVA_OPTIONS": CLI_JVM_OPTIONS,
        "LAKEHOUSE__SPARK__CLASS_DATA_DIR": str(CDS_DIR) if any(CDS_DIR.glob("*.jsa")) else "none",
    }
    if METASTORE_ENV in os.environ:
        env[METASTORE_ENV] = os.environ[METASTORE_ENV]
    env.update({f"LAKEHOUSE__{k.upper()}": v for k, v in keys.items()})
    return env


def settings_for(storage_root: Path, bootstrap: str, topic_prefix: str, **keys: str) -> Settings:
    return load_settings("local", environ=overrides(storage_root, bootstrap, topic_prefix, **keys))


def lakehouse_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "lakehouse.cli", *args]


def start_lakehouse(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """The CLI in its own process, left running (a continuous job), its output in one pipe."""
    return subprocess.Popen(
        lakehouse_command(*args),
        env={**os.environ, **env},
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def run_lakehouse(
    *args: str, env: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """The CLI in its own process, as a user or a scheduler would run it."""
    return subprocess.run(
        lakehouse_command(*args),
        env={**os.environ, **env},
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def spark_log_of(console: str, pid: int) -> str:
    """What the CLI run of process `pid` wrote to the Spark log its console names: runs of
    one application share the file, each from a line naming its pid."""
    path = Path(console.split("Spark log: ", 1)[1].splitlines()[0])
    runs = path.read_text().split("\n==== ")
    return next(run for run in reversed(runs) if f" pid {pid}: " in run.split("\n", 1)[0])


FOREIGN = re.compile(
    "|".join(
        [
            # log4j, Kafka, Python logging: a time (after a date, maybe bracketed), a level
            r"^\[?(?:\d{2,4}[-/]\d{2}[-/]\d{2}[ T])?\d{2}:\d{2}:\d{2}[\d.,]*\]?\s+(?:\[[^]]*\]\s+)?"
            r"(?:TRACE|DEBUG|INFO|WARN|WARNING|ERROR|FATAL)\b",
            r"^(?:TRACE|DEBUG|INFO|WARN|ERROR|FATAL)\s+[\w.$]+:\s",  # log4j without a time
            r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]*:",  # Python logging's last resort
            r"^WARNING:|^Warning:",  # the JVM, spark-submit
            r":\d+: \w*Warning: ",  # Python's warnings module
            r"org\.apache\.|SLF4J|log4j|StatusLogger",
            r"Using incubator modules|Setting default log level|To adjust logging level",
            r"^\s*at [\w$.<>/]+\(.*\)$|^Caused by: |^\s*\.\.\. \d+ more$",  # JVM stacks
            r"^(?:java|javax|scala|com|org|io)\.[\w.$]+(?:Exception|Error)\b",
            r"^Traceback \(most recent call last\):",
            r"Apache Derby|^\w{3} \w{3} [ \d]\d \d{2}:\d{2}:\d{2} \w+ \d{4} : ",  # Derby
            r"^(?:Starting )?Streaming TransformWithState\w* Python worker",  # PySpark workers
            r"^Deleted \d+ files and directories in a total of",  # Delta's VACUUM
            r"\d+%\|",  # tqdm progress bars (Great Expectations)
        ]
    )
)
"""A line of Spark, Hive, Derby, Kafka, log4j, the JVM or Python's warnings and logging."""


def foreign_lines(output: str) -> list[str]:
    """The lines of a command's console output that are not the project's own: what the
    JVM, its libraries and Python's warnings print. `lakehouse: ...` error lines are the
    project's even when they name a Java class."""
    return [
        line
        for line in output.splitlines()
        if not line.startswith("lakehouse: ") and FOREIGN.search(line)
    ]


def command_lines() -> set[str]:
    """The command line of every process on the machine now, as `ps` shows them."""
    lines = set()
    for entry in Path("/proc").iterdir():
        try:
            line = (entry / "cmdline").read_bytes() if entry.name.isdigit() else b""
        except OSError:  # ended meanwhile
            continue
        lines.add(line.replace(b"\0", b" ").decode(errors="replace").strip())
    return lines


@contextmanager
def command_lines_seen(every_s: float = 0.2) -> Iterator[set[str]]:
    """The command line of every process on the machine, as `ps` shows them to any user,
    sampled while the block runs."""
    seen: set[str] = set()
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            seen.update(command_lines())
            stop.wait(every_s)

    sampler = threading.Thread(target=sample, daemon=True, name="command-lines")
    sampler.start()
    try:
        yield seen
    finally:
        stop.set()
        sampler.join()


def lineage_events(state_dir: Path) -> list[dict[str, Any]]:
    """The OpenLineage events a run wrote to its file transport, oldest first."""
    path = state_dir / EVENTS_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
