"""A stream that stops says why in one line: the cause, never only the query's id."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.core.errors import LakehouseError
from lakehouse.runtime.streams import run_foreach_batch
from lakehouse.storage.delta import Txn

pytestmark = pytest.mark.integration


def test_a_spark_error_in_a_batch_is_reported_by_its_class_and_message(
    spark: SparkSession, tmp_path: Path
) -> None:
    source, sink = str(tmp_path / "source"), str(tmp_path / "sink")
    spark.createDataFrame([("yesterday",)], "event_time STRING").write.format("delta").save(source)

    def write(batch: DataFrame, txn: Txn) -> None:
        # ANSI casts throw on content, inside the write's tasks.
        timestamps = batch.select(F.col("event_time").cast("timestamp").alias("event_time"))
        timestamps.write.format("delta").mode("append").save(sink)

    with pytest.raises(LakehouseError) as error:
        run_foreach_batch(
            spark,
            lambda: spark.readStream.format("delta").load(source),
            "cast_stream",
            str(tmp_path / "checkpoint"),
            write,
            None,
        )

    message = str(error.value)
    assert message.startswith("cast_stream failed: [CAST_INVALID_INPUT] The value 'yesterday'")
    assert "\n" not in message and "Query [id" not in message


def test_a_setup_beside_the_query_start_comes_before_the_first_write_and_its_failure_stops_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    source = str(tmp_path / "source")
    spark.createDataFrame([(1,)], "n INT").write.format("delta").save(source)
    done: list[str] = []

    def run(setup: Callable[[], None]) -> None:
        run_foreach_batch(
            spark,
            lambda: spark.readStream.format("delta").load(source),
            "setup_stream",
            str(tmp_path / f"checkpoint-{len(done)}"),
            lambda batch, txn: done.append("write"),
            None,
            setup=setup,
        )

    run(lambda: done.append("setup"))
    assert done == ["setup", "write"]

    def refuse() -> None:
        raise LakehouseError("the tables could not be made")

    with pytest.raises(LakehouseError, match="the tables could not be made"):
        run(refuse)
    assert done == ["setup", "write"]  # the query stopped before its batch was written
    assert not spark.streams.active
