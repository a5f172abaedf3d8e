"""Game day's namespace on a target, and its pipeline as a process of its own.

The namespace is the target's settings with everything a pipeline writes moved aside: its
own topics under a prefix (on a broker of its own when the target's is the embedded one,
which game day may then stop), its own lake root and checkpoints, its own quality folder,
its run artifacts and logs in its own folder, and a catalog of its own (in memory: no name
it registers reaches the deployment's metastore). Each embedded service the target uses is
resolved once to its address, so that the namespace's state folder holds no service."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlparse

from lakehouse import PROJECT_ROOT
from lakehouse.core.settings import EMBEDDED, CatalogSettings, Settings, load_settings
from lakehouse.gameday.faults import Gate
from lakehouse.services import embedded, reached
from lakehouse.services.cluster import EmbeddedCluster
from lakehouse.services.kafka import EmbeddedKafka, resolve_bootstrap
from lakehouse.storage import buckets

GOLD_EVERY_S = 5
"""Gold's schedule in the namespace: a step's gold answer within seconds of its silver."""
TRIGGER = "1 second"
"""The streams' trigger interval in the namespace: a step's records within seconds."""


@dataclass(frozen=True)
class Namespace:
    """Where one game day runs: `env` puts a pipeline there; `settings` are what it reads."""

    day_id: str
    folder: Path
    target: str | None
    env: dict[str, str]
    settings: Settings
    broker: EmbeddedKafka | None
    """The broker game day started, when the target's is the embedded one."""
    gate: Gate | None
    """What the pipeline reaches the object store through, on a lake on one."""
    cluster: EmbeddedCluster | None
    """The embedded cluster the pipeline runs on, when the target's is that one."""
    deployed: Settings
    """The target's own settings: its report site is where the day's page goes."""

    @property
    def bootstrap(self) -> str:
        return self.settings.kafka.bootstrap_servers

    @property
    def prefix(self) -> str:
        return self.settings.kafka.topic_prefix

    @property
    def on_s3(self) -> bool:
        return self.settings.storage.root.startswith("s3a://")

    def verifier(self) -> Settings:
        """What game day's own Spark reads the lake with: on this machine's cores, not a
        cluster's, whose workers a step may kill."""
        if self.settings.spark.master.startswith("local"):
            return self.settings
        return replace(self.settings, spark=replace(self.settings.spark, master="local[2]"))

    def local(self, uri: str) -> Path:
        """The folder a `file:` URI of a local lake names."""
        return Path(urlparse(uri).path)


def open_namespace(target: str | None, day_id: str) -> Namespace:
    """Game day `day_id`'s namespace on `target`, its broker started if it has its own."""
    deployed = load_settings(target)
    buckets.require(deployed)  # before anything starts: one line, not a failed first step
    folder = deployed.storage.local_state_dir / "gameday" / day_id
    broker = None
    if deployed.kafka.bootstrap_servers == EMBEDDED:
        broker = EmbeddedKafka(folder / "kafka")
        bootstrap = broker.start()
    else:
        bootstrap = resolve_bootstrap(deployed)
    try:
        env = namespace_env(deployed, day_id, folder, bootstrap)
        settings = load_settings(target, environ={**os.environ, **env})
    except BaseException:
        if broker is not None:
            broker.stop()
        raise
    gate = None
    if settings.storage.root.startswith("s3a://") and settings.s3.endpoint.startswith("http:"):
        # The pipeline reaches the store through a gate game day holds (it reads each
        # request: plain HTTP only); game day itself reads the lake directly.
        gate = Gate(settings.s3.endpoint)
        env = {**env, "LAKEHOUSE__S3__ENDPOINT": gate.endpoint}
    cluster = embedded(deployed)["cluster"] if deployed.spark.master == EMBEDDED else None
    cluster = cluster if isinstance(cluster, EmbeddedCluster) else None
    return Namespace(day_id, folder, target, env, settings, broker, gate, cluster, deployed)


def namespace_env(deployed: Settings, day_id: str, folder: Path, bootstrap: str) -> dict[str, str]:
    """The variables that move a pipeline of `deployed` into the namespace `day_id`."""
    # Its catalog is its own (in memory): the target's metastore need not even run.
    services = reached(replace(deployed, catalog=CatalogSettings("none")))
    spark_conf = dict(deployed.spark.conf)
    if services.executor_python:
        spark_conf["spark.pyspark.python"] = services.executor_python
    keys = {
        "storage.root": f"{deployed.storage.root}/_gameday/{day_id}",
        "storage.local_state": str(folder / "state"),
        "quality.local_dir": str(folder / "quality"),
        "kafka.bootstrap_servers": bootstrap,
        "kafka.topic_prefix": f"gameday-{day_id}.{deployed.kafka.topic_prefix}",
        "catalog.metastore": "none",
        "spark.master": services.master,
        "spark.conf": json.dumps(spark_conf),
        "bronze.trigger_interval": TRIGGER,
        "silver.trigger_interval": TRIGGER,
        "gold.every_seconds": str(GOLD_EVERY_S),
        "lineage.transport": "file",
        "metrics.enabled": "false",
    }
    if services.s3_endpoint:
        keys["s3.endpoint"] = services.s3_endpoint
    if services.s3_keys[0]:
        keys["s3.access_key"], keys["s3.secret_key"] = services.s3_keys
    return {f"LAKEHOUSE__{k.replace('.', '__').upper()}": v for k, v in keys.items()}


class Pipeline:
    """`lakehouse run all --continuous` in the namespace, in a process group of its own, so
    that a kill takes its JVM with it, as a lost machine would."""

    def __init__(self, space: Namespace) -> None:
        # Beside the report, not in the namespace: kept when the namespace is removed.
        self.space, self.log = space, space.folder.parent / f"{space.day_id}.pipeline.log"
        self.job: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.job = lakehouse(
                self.space, "run", "all", "--continuous", stdout=out, start_new_session=True
            )

    def alive(self) -> bool:
        return self.job is not None and self.job.poll() is None

    def kill(self) -> None:
        """SIGKILL to the process group: no handler, no flush, no clean stop."""
        if self.alive():
            assert self.job is not None
            os.killpg(self.job.pid, signal.SIGKILL)
            self.job.wait()

    def stop(self, timeout_s: float = 180) -> int | None:
        """SIGTERM (each part stops after its batch), then SIGKILL after `timeout_s`."""
        if self.job is None:
            return None
        if self.alive():
            self.job.send_signal(signal.SIGTERM)
            try:
                self.job.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.job.returncode


def ended(command: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    """Its exit code, or None (and it killed) if it still runs after `timeout_s`."""
    try:
        return command.wait(timeout_s)
    except subprocess.TimeoutExpired:
        command.kill()
        return None


def lakehouse(space: Namespace, *args: str, **popen: object) -> subprocess.Popen[bytes]:
    """A `lakehouse` command in the namespace, as its operator would run it."""
    popen.setdefault("stdout", subprocess.DEVNULL)
    return subprocess.Popen(  # type: ignore[call-overload]
        [
            sys.executable,
            "-m",
            "lakehouse.cli",
            *(["--target", space.target] if space.target else []),
            *args,
        ],
        env={**os.environ, **space.env},
        cwd=PROJECT_ROOT,
        stderr=subprocess.STDOUT,
        **popen,
    )
