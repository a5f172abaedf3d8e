"""Runs with every table on the test's S3 server: their traffic and settings, tables read
back, and a run whose lease renewals the server leaves hanging."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import threading
import time
from contextlib import suppress
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from lakehouse import PROJECT_ROOT
from lakehouse.gameday.faults import Gate, Moment, kill_job
from lakehouse.ops.producer import TrafficSpec
from lakehouse.services.s3 import EmbeddedS3
from tests.support import S3_KEYS, lakehouse_command, overrides

PREFIX = "s3lake.sensors."
SPEC = TrafficSpec(seed=31, sensors=2, sessions_per_sensor=3, rows_per_snapshot=8,
                   updates_per_session=25, resync_every=10, partitions=2, topic_prefix=PREFIX,
                   faults={"gap": 1, "duplicate": 1, "malformed_json": 1})  # fmt: skip
# What differs between two runs of the same data: when and in which batch it was written.
VOLATILE = {"ingested_at", "batch_id", "updated_batch_id", "started_at", "seconds", "run_id"}
COMPARED = (
    "bronze.sensor_records", "silver.row_changes", "silver.violations", "silver.sessions",
    "silver.session_rows", "gold.session_summary", "gold.sensor_hourly", "gold.sensor_daily",
)  # fmt: skip


FAIL_FAST = json.dumps({"spark.hadoop.fs.s3a.retry.limit": "1",
                        "spark.hadoop.fs.s3a.attempts.maximum": "1"})  # fmt: skip
"""`spark.conf` of a run that fails within seconds of S3 going away, not after S3A's
minutes of retries: for tests that take S3 away under a job."""

PIPELINE = (("storage", "init"), ("run", "all"), ("check",))
"""Every command of a run, each expected to succeed: the traffic's faults are quarantined."""


def s3_env(tmp_path: Path, bootstrap: str, server: EmbeddedS3, **keys: str) -> dict[str, str]:
    """A run whose tables, checkpoints and quality results are all under s3a://lake/."""
    endpoint = server.address()
    assert endpoint is not None
    on_s3 = {
        # Unique per test: a module's tests share one server, and a root with another
        # test's checkpoints in it would resume those.
        "storage__root": f"s3a://lake/{tmp_path.parent.name}/{tmp_path.name}",
        "s3__endpoint": endpoint,
        "s3__access_key": S3_KEYS[0],
        "s3__secret_key": S3_KEYS[1],
    }
    return overrides(tmp_path, bootstrap, PREFIX, **{**on_s3, **keys})


def read_s3(spark: SparkSession, server: EmbeddedS3, uri: str) -> DataFrame:
    """A table on the test's S3 server, read by this process's Spark."""
    use_s3(spark, server)
    return spark.read.format("delta").load(uri)


def use_s3(spark: SparkSession, server: EmbeddedS3) -> None:
    """This process's Spark reads and writes s3a:// paths on the test's S3 server."""
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    # Tests run several S3 servers with one bucket name: Hadoop must not hand out a cached
    # client of a server an earlier test stopped.
    for key, value in {"endpoint": server.address(), "path.style.access": "true",
                       "access.key": S3_KEYS[0], "secret.key": S3_KEYS[1],
                       "impl.disable.cache": "true"}.items():  # fmt: skip
        hadoop.set(f"fs.s3a.{key}", value)


def comparable(frame: DataFrame) -> DataFrame:
    return frame.select(*[c for c in frame.columns if c not in VOLATILE])


def table_version(spark: SparkSession, server: EmbeddedS3, uri: str) -> int:
    read_s3(spark, server, uri)  # sets the S3 keys on this session's Hadoop configuration
    return int(spark.sql(f"DESCRIBE HISTORY delta.`{uri}` LIMIT 1").first()["version"])  # type: ignore[index]


class Stall(Gate):
    """A gate that, once a request matching `after` went by, answers each request matching
    `stalled` a byte of its headers every half second, for ever: a call no client timeout
    ends. The rest goes through; `commits` notes when each Delta commit did."""

    def __init__(self, upstream: str, stalled: str, after: str) -> None:
        super().__init__(upstream)
        self._stalled, self._client = re.compile(stalled), threading.local()
        self.commits: list[float] = []
        self.arm(Moment("", rf"{stalled}|^PUT /\S+/_delta_log/\d+\.json", after), lambda: None)

    def _pump(self, source: socket.socket, sink: socket.socket, requests: bool) -> None:
        self._client.socket = source  # what `_strike_once`, in this thread, answers
        super()._pump(source, sink, requests)

    def _strike_once(self, request: str) -> bool:
        if not self._stalled.search(request):
            self.commits.append(time.time())
            return False
        self.struck.set()
        threading.Thread(target=_trickle, args=(self._client.socket,), daemon=True).start()
        return True


def _trickle(client: socket.socket) -> None:
    with suppress(OSError):
        client.sendall(b"HTTP/1.1 200 OK\r\nx-stalled: ")
        while True:
            time.sleep(0.5)
            client.sendall(b".")


def lakehouse_through(
    endpoint: str, args: tuple[str, ...], env: dict[str, str], log: Path
) -> subprocess.Popen[str]:
    """The CLI started with `args`, reaching S3 at `endpoint` (a proxy), its errors to `log`."""
    return subprocess.Popen(
        lakehouse_command(*args),
        env={**os.environ, **env, "LAKEHOUSE__S3__ENDPOINT": endpoint},
        cwd=PROJECT_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
        text=True,
        start_new_session=True,  # its JVM in its group: a kill takes both
    )


def run_stalled(
    args: tuple[str, ...], env: dict[str, str], server: EmbeddedS3, leases: tuple[str, ...],
    log: Path,
) -> tuple[int, Stall]:  # fmt: skip
    """Run the CLI with every renewal of the lease of `leases[0]` stalled, from the moment it
    holds all of `leases` (the tables it writes, in order): its exit code, and the gate."""
    upstream = server.address()
    assert upstream is not None, "the S3 server is not running"
    began = time.monotonic()
    lease = r"^PUT /\S+/_leases/{}/"
    stall = Stall(upstream, lease.format(re.escape(leases[0])), lease.format(re.escape(leases[-1])))
    try:
        job = lakehouse_through(stall.endpoint, args, env, log)
        try:
            job.wait(150)
        except subprocess.TimeoutExpired:  # it never stopped
            kill_job(lambda: job)()
            job.wait()
    finally:
        stall.close()
    print(f"renewals stalled: {len(stall.commits)} Delta commits, exit {job.returncode} after "
          f"{time.monotonic() - began:.0f}s")  # fmt: skip
    return job.returncode, stall
