"""Makes the class-data archives of the tests' CLI runs in `CDS_DIR`, by the product's own
means (`spark.class_data_dir`, `lakehouse/runtime/class_data.py`): each run below writes
the archive of its class path as its JVM exits. One `lakehouse build` of a little traffic
(the runs that name the tests' metastore: Spark, Delta, Kafka's client, the state store,
the checks), then bronze again without a catalog (game day's namespaces, whose catalog is
their own). `make test` runs this before pytest, as it fetches the jars.

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
from tests.support import CDS_DIR, METASTORE_ENV, overrides, run_lakehouse

TRAFFIC = TrafficSpec(seed=7, sensors=1, sessions_per_sensor=2, rows_per_snapshot=5,
                      updates_per_session=10, partitions=2, topic_prefix="cds.",
                      faults={"gap": 1})  # fmt: skip
"""Enough to take the paths of a build once: snapshots, updates, a violation, gold."""


def make_archives() -> None:
    began = time.monotonic()
    CDS_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        broker, metastore = EmbeddedKafka(root / "kafka"), EmbeddedMetastore(root / "catalog")
        try:
            bootstrap = broker.start()
            # The tests' runs name a metastore, whose driver is then on their class path.
            os.environ[METASTORE_ENV] = metastore.start()
            produce(TRAFFIC, bootstrap)
            env = overrides(root, bootstrap, TRAFFIC.topic_prefix)
            env["LAKEHOUSE__SPARK__CLASS_DATA_DIR"] = str(CDS_DIR)
            _run(env, "build")
            _run({**env, "LAKEHOUSE__CATALOG__METASTORE": "none"}, "run", "bronze")
        finally:
            broker.stop()
            metastore.stop()
    made = sorted(CDS_DIR.glob("*.jsa"))
    size = sum(a.stat().st_size for a in made) / 2**20
    print(f"{len(made)} class-data archives in {CDS_DIR} ({size:.0f} MB, "
          f"{time.monotonic() - began:.0f}s)")  # fmt: skip


def _run(env: dict[str, str], *args: str) -> None:
    """A CLI run, which returns once its JVM has written its archive."""
    ran = run_lakehouse(*args, env=env, timeout=600)
    if ran.returncode != 0:
        sys.exit(f"`lakehouse {' '.join(args)}`, which makes an archive in {CDS_DIR}, failed:\n"
                 f"{ran.stdout[-3000:]}")  # fmt: skip


if __name__ == "__main__":
    make_archives()
