"""What every silver table shares: creation with lineage columns, and idempotent MERGE."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

from lakehouse import catalog
from lakehouse.streaming import Txn

LINEAGE_COLUMNS = "topic STRING NOT NULL, partition INT NOT NULL, offset BIGINT NOT NULL"


def create(
    spark: SparkSession, name: str, path: str, columns: str, change_feed: bool = False
) -> None:
    catalog.create_table(
        spark,
        name,
        path,
        f"{columns}, {LINEAGE_COLUMNS}",
        catalog.CHANGE_FEED if change_feed else {},
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
