"""Makes `CDS_ARCHIVE`, the class-data sharing archive of the CLI runs' JVMs: one `lakehouse
build` of a little traffic, whose JVM writes every class it loaded (Spark, Delta, Kafka's
client, the state store, the checks) into the archive as it exits. `make test` runs this
before pytest, as it fetches the jars; a JVM whose jars or class path differ from the
archive's says so in its Spark log and loads its classes as usual.

    python -m tests.support.cds
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from lakehouse.ops.producer import TrafficSpec, produce
from lakehouse.services.kafka import EmbeddedKafka
from lakehouse.services.metastore import EmbeddedMetastore
from tests.support import CDS_ARCHIVE, METASTORE_ENV, command_lines, overrides, run_lakehouse

TRAFFIC = TrafficSpec(seed=7, sensors=1, sessions_per_sensor=2, rows_per_snapshot=5,
                      updates_per_session=10, partitions=2, topic_prefix="cds.",
                      faults={"gap": 1})  # fmt: skip
"""Enough to take the paths of a build once: snapshots, updates, a violation, gold."""


def make_archive() -> None:
    began, archive = time.monotonic(), CDS_ARCHIVE
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        broker, metastore = EmbeddedKafka(root / "kafka"), EmbeddedMetastore(root / "catalog")
        try:
            bootstrap = broker.start()
            # The tests' runs name a metastore, whose driver is then on their class path:
            # this one's must be the same for them to use the archive.
            os.environ[METASTORE_ENV] = metastore.start()
            produce(TRAFFIC, bootstrap)
            env = overrides(root, bootstrap, TRAFFIC.topic_prefix)
            env["SPARK_SUBMIT_OPTS"] = f"-XX:ArchiveClassesAtExit={partial}"
            built = run_lakehouse("build", env=env, timeout=600)
            if built.returncode != 0:
                sys.exit(f"the build that makes {archive} failed:\n{built.stdout[-3000:]}")
            _wait_for_the_jvm(partial)
        finally:
            broker.stop()
            metastore.stop()
    partial.replace(archive)
    size = archive.stat().st_size / 2**20
    print(f"class-data archive ready in {archive} ({size:.0f} MB, {time.monotonic() - began:.0f}s)")


def _wait_for_the_jvm(partial: Path, within_s: float = 120) -> None:
    """The build's Python ends before its JVM, which writes the archive as it exits."""
    deadline = time.monotonic() + within_s
    while any(f"ArchiveClassesAtExit={partial}" in line for line in command_lines()):
        if time.monotonic() > deadline:
            sys.exit(f"the JVM that writes {partial} did not exit within {within_s:.0f}s")
        time.sleep(0.5)
    if not partial.exists():
        sys.exit(f"the JVM exited without writing {partial}")


if __name__ == "__main__":
    make_archive()
