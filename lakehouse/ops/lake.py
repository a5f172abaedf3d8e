"""The lake as `explain` reads it: tables by name, at their latest version, and their
change feeds, each read's failure one line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from lakehouse.core.errors import LakehouseError, explain
from lakehouse.core.settings import Settings


@dataclass(frozen=True)
class Lake:
    """The tables as an explanation reads them: by name, latest version."""

    spark: SparkSession
    settings: Settings

    def __call__(self, name: str) -> DataFrame:
        try:
            return self.spark.read.format("delta").load(self.settings.storage.table_uri(name))
        except Exception as error:
            raise LakehouseError(f"cannot read {name}: {explain(error)}") from None

    def changes(self, name: str, start: int) -> DataFrame:
        """The changes of `name`'s change feed from version `start`."""
        return (
            self.spark.read.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", start)
            .load(self.settings.storage.table_uri(name))
        )


def rows_of(frame: DataFrame, order: Sequence[str]) -> list[dict[str, Any]]:
    return [r.asDict() for r in frame.orderBy(*order).collect()]
