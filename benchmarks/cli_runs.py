"""The fixed cost of a CLI run, and what JVM options or Spark settings do to it.

Each variant runs the same four commands on a fresh lake of its own, as a user or a test
runs them, each a new JVM: `run bronze`, `run silver`, `run gold`, and `run silver` again
with nothing new (84 records of traffic, so that what is measured is the run, not the
data). All variants share one broker and one process; the first is the baseline, and each
prints its ratio to it. No variant maps classes from an archive (`spark.class_data_dir`)
but those named `class-data`. The CLI runs of the tests take the JVM options of variant `c1`
(`CLI_JVM_OPTIONS` in tests/support) by this measurement (docs/testing.md), and the Spark
settings of `c1-interpreted`.

    python -m benchmarks.cli_runs                         # the variants below
    python -m benchmarks.cli_runs --only c2 c1
    python -m benchmarks.cli_runs --only c2 c2-class-data
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import broker, run_environ
from lakehouse import PROJECT_ROOT
from lakehouse.ops.producer import TrafficSpec, produce

C1 = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
"""C1 alone, with the code cache C2 would have (C1 alone reserves 48 MB)."""
INTERPRETED = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}
"""No generated code at all: every plan interpreted, no class compiled (Spark's internal
setting that its own tests use)."""
VARIANTS: dict[str, tuple[dict[str, str], str, bool]] = {
    # name: (Spark settings, JDK_JAVA_OPTIONS, classes mapped from a class-data archive)
    "c2": ({}, "", False),
    "c2-class-data": ({}, "", True),
    "c1": ({}, C1, False),
    "c1-small-code-cache": ({}, "-XX:TieredStopAtLevel=1", False),
    "c1-serial-gc": ({}, f"{C1} -XX:+UseSerialGC", False),
    "no-whole-stage-codegen": ({"spark.sql.codegen.wholeStage": "false"}, "", False),
    "c1-no-whole-stage-codegen": ({"spark.sql.codegen.wholeStage": "false"}, C1, False),
    "c1-interpreted": (INTERPRETED, C1, False),
    "c1-interpreted-class-data": (INTERPRETED, C1, True),
    "no-adaptive": ({"spark.sql.adaptive.enabled": "false"}, "", False),
    "no-delta-stats": ({"spark.databricks.delta.stats.collect": "false"}, "", False),
}
COMMANDS = (("run", "bronze"), ("run", "silver"), ("run", "gold"), ("run", "silver"))
TRAFFIC = TrafficSpec(seed=1, sensors=2, sessions_per_sensor=3, rows_per_snapshot=4,
                      updates_per_session=12, partitions=2, topic_prefix="cli.")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, broker(Path(folder)) as bootstrap:
        records = produce(TRAFFIC, bootstrap).records
        print(f"{records} records; each variant: {', '.join(' '.join(c) for c in COMMANDS)}")
        baseline = None
        for name in args.only:
            seconds = run_variant(Path(folder) / name, bootstrap, *VARIANTS[name])
            total = sum(seconds)
            baseline = baseline or total
            runs = ", ".join(f"{s:.1f}" for s in seconds)
            print(f"{name:24} {runs:28} total {total:6.1f} s  ratio {total / baseline:.2f}")


def run_variant(
    root: Path, bootstrap: str, spark_conf: dict[str, str], jvm: str, class_data: bool
) -> list[float]:
    """Seconds of each command of `COMMANDS`, run in turn on a lake under `root`. With
    `class_data`, each JVM maps the archive (`spark.class_data_dir`) that the same commands
    wrote on a lake of their own first, untimed: what every run after a machine's first sees."""
    if class_data:
        run_commands(root / "warm-up", bootstrap, spark_conf, jvm, root / "_jvm")
    return run_commands(root, bootstrap, spark_conf, jvm, root / "_jvm" if class_data else None)


def run_commands(
    root: Path, bootstrap: str, spark_conf: dict[str, str], jvm: str, archives: Path | None
) -> list[float]:
    environ = {
        **os.environ,
        **run_environ(
            root,
            bootstrap,
            kafka__topic_prefix=TRAFFIC.topic_prefix,
            spark__master="local[2]",
            spark__conf=json.dumps(spark_conf),
        ),
        "LAKEHOUSE__STORAGE__LOCAL_STATE": str(root / "_state"),
        "JDK_JAVA_OPTIONS": jvm,
        "LAKEHOUSE__SPARK__CLASS_DATA_DIR": str(archives or "none"),
    }
    seconds = []
    for command in COMMANDS:
        started = time.perf_counter()
        ran = subprocess.run(
            [sys.executable, "-m", "lakehouse.cli", *command],
            env=environ,
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
        )
        seconds.append(time.perf_counter() - started)
        if ran.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed: {ran.stderr[-2000:]}")
    return seconds


if __name__ == "__main__":
    main()
