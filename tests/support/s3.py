"""Runs with every table on the test's S3 server: their traffic and settings, tables read back."""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from lakehouse.ops.producer import TrafficSpec
from lakehouse.services.s3 import EmbeddedS3
from tests.support import S3_KEYS, overrides

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
