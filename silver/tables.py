"""What every silver table shares: creation with lineage columns, and idempotent MERGE."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

from lakehouse.streaming import Txn

LINEAGE_COLUMNS = "topic STRING NOT NULL, partition INT NOT NULL, offset BIGINT NOT NULL"


def create(spark: SparkSession, path: str, columns: str) -> None:
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS delta.`{path}` ({columns}, {LINEAGE_COLUMNS}) USING delta"
    )


@contextmanager
def merge_txn(spark: SparkSession, txn: Txn) -> Iterator[None]:
    """MERGE has no writer options; Delta reads the transaction from session settings."""
    spark.conf.set("spark.databricks.delta.write.txnAppId", txn.app_id)
    spark.conf.set("spark.databricks.delta.write.txnVersion", str(txn.version))
    try:
        yield
    finally:
        spark.conf.unset("spark.databricks.delta.write.txnAppId")
        spark.conf.unset("spark.databricks.delta.write.txnVersion")
