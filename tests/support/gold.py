"""Gold's traffic in increments, the bronze table it fills, gold computed again with pandas."""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession

from bronze import sensor_records
from gold import sensor_daily, sensor_hourly, session_summary
from lakehouse.core.settings import Settings
from lakehouse.gameday.gold_reference import daily_reference, hourly_reference, summary_reference
from lakehouse.ops.producer import TrafficSpec, generate_traffic
from lakehouse.storage import delta
from silver import row_changes, sessions, violations

BASE = TrafficSpec(
    sensors=2,
    sessions_per_sensor=3,
    rows_per_snapshot=5,
    updates_per_session=12,
    resync_every=5,
    session_stagger_seconds=1500,
    partitions=2,
)
INCREMENTS = (
    replace(BASE, seed=1, start_time=datetime(2026, 1, 1, 0, 0, tzinfo=UTC),
            faults={"gap": 1, "duplicate": 1, "malformed_json": 1}),
    replace(BASE, seed=2, start_time=datetime(2026, 1, 2, 22, 30, tzinfo=UTC)),
    # Late: sessions whose events fall into hours and a day already aggregated.
    replace(BASE, seed=3, start_time=datetime(2026, 1, 1, 0, 10, tzinfo=UTC),
            sessions_per_sensor=2),
)  # fmt: skip


class Bronze:
    """A bronze table filled increment by increment, offsets running on per partition as a
    broker's would."""

    def __init__(self, spark: SparkSession, path: str) -> None:
        self.spark, self.path = spark, path
        self.next_offset: dict[tuple[str, int], int] = defaultdict(int)
        delta.create(spark, sensor_records.TABLE, path)

    def append(self, spec: TrafficSpec) -> None:
        now = datetime.now(UTC)
        rows = []
        for r in generate_traffic(spec):
            offset = self.next_offset[(r.topic, r.partition)]
            self.next_offset[(r.topic, r.partition)] += 1
            rows.append((r.topic, r.partition, offset, r.key, r.value, now, 0, [], now, 0))
        random.Random(spec.seed).shuffle(rows)
        schema = self.spark.read.format("delta").load(self.path).schema
        self.spark.createDataFrame(rows, schema).write.format("delta").mode("append").save(
            self.path
        )


def table(spark: SparkSession, s: Settings, name: str) -> DataFrame:
    return spark.read.format("delta").load(s.storage.table_uri(name))


def assert_rows(
    found: DataFrame, key: tuple[str, ...], expected: dict[tuple[Any, ...], dict[str, Any]]
) -> None:
    rows = {tuple(_cell(r[k]) for k in key): r.asDict() for r in found.collect()}
    assert set(rows) == {tuple(_cell(k) for k in keys) for keys in expected}
    for keys, values in expected.items():
        row = rows[tuple(_cell(k) for k in keys)]
        for column, value in values.items():
            assert _same(row[column], value), (keys, column, row[column], value)


def _cell(value: Any) -> Any:
    return value.to_pydatetime() if isinstance(value, pd.Timestamp) else value


def _same(found: Any, expected: Any) -> bool:
    if isinstance(expected, float) and not isinstance(found, str):
        if math.isnan(expected):
            return found is None
        return math.isclose(found, expected, rel_tol=1e-9)
    return bool(found == expected)


def assert_gold_equals_pandas_from_silver(spark: SparkSession, s: Settings) -> None:
    changes = table(spark, s, row_changes.NAME).toPandas()
    assert_rows(table(spark, s, sensor_hourly.NAME), sensor_hourly.KEY, hourly_reference(changes))
    assert_rows(table(spark, s, sensor_daily.NAME), sensor_daily.KEY, daily_reference(changes))
    assert_rows(
        table(spark, s, session_summary.NAME),
        session_summary.KEY,
        summary_reference(
            table(spark, s, sessions.NAME).toPandas(), table(spark, s, violations.NAME).toPandas()
        ),
    )
