"""`lakehouse shadow compare`: the live version's answers beside the shadow's, table by
table, by each table's key, once both have read the same input.

A difference is reported only between versions that read the same bronze (silver's streams
at the same bronze version, neither in the middle of a batch) and whose gold read all of
its inputs: anything else could be lag, and is said to be, never reported as a difference.
Each table is read at a version pinned before and after that look, so a batch committed
meanwhile makes the compare look again rather than compare two moments.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, FloatType

from lakehouse import definitions as pipeline
from lakehouse.core.settings import Settings
from lakehouse.ops import shadow
from lakehouse.storage import catalog, delta
from lakehouse.storage import versions as stored

KINDS = ("only_live", "only_shadow", "changed")
RELATIVE_TOLERANCE = 1e-9
"""Doubles equal within this: an aggregate summed in another order differs in its last bits."""
SAMPLES = 5


@dataclass(frozen=True)
class TableDiff:
    """How one table differs between the versions, by its key."""

    table: str
    key: tuple[str, ...]
    rows: dict[str, int]
    """`live` and `shadow` -> rows."""
    counts: dict[str, int]
    """Each of `KINDS` -> rows of that kind."""
    columns_changed: dict[str, int]
    """Column -> changed rows in which it differs."""
    samples: dict[str, list[dict[str, Any]]]
    """Each of `KINDS` -> a few of its rows: the key, and each differing column's two values."""
    columns_only: dict[str, list[str]] = field(default_factory=dict)
    """`live` / `shadow` -> columns that version's table has and the other's has not."""

    @property
    def equal(self) -> bool:
        return not any(self.counts.values()) and not any(self.columns_only.values())


def compared_columns(live: DataFrame, shadow: DataFrame, key: tuple[str, ...]) -> list[str]:
    """The columns both tables have, but the key and those that only say which batch wrote a
    row (another version writes in batches of its own)."""
    return [
        c
        for c in live.columns
        if c in shadow.columns and c not in key and not c.endswith("batch_id")
    ]


def table_diff(
    table: str, live: DataFrame, shadow: DataFrame, key: tuple[str, ...], samples: int = SAMPLES
) -> TableDiff:
    """Rows only in live, only in the shadow, and changed, with the columns that differ."""
    columns = compared_columns(live, shadow, key)
    types = {f.name: f.dataType for f in live.schema.fields}
    left = live.select(*key, *(F.col(c).alias(f"l_{c}") for c in columns), F.lit(1).alias("_l"))
    right = shadow.select(*key, *(F.col(c).alias(f"s_{c}") for c in columns), F.lit(1).alias("_s"))
    joined = left.join(right, on=list(key), how="full_outer")
    differing = F.array(
        *(F.when(_differs(F.col(f"l_{c}"), F.col(f"s_{c}"), types[c]), F.lit(c)) for c in columns)
    )
    kinds = (
        F.when(F.col("_l").isNull(), "only_shadow")
        .when(F.col("_s").isNull(), "only_live")
        .when(F.size(F.filter(differing, lambda c: c.isNotNull())) > 0, "changed")
    )
    found = (
        joined.withColumn("_differs", F.filter(differing, lambda c: c.isNotNull()))
        .withColumn("_kind", kinds)
        .where(F.col("_kind").isNotNull())
        .cache()
    )
    try:
        counts = {r["_kind"]: int(r["count"]) for r in found.groupBy("_kind").count().collect()}
        by_column = found.select(F.explode("_differs").alias("c")).groupBy("c").count().collect()
        shown = {kind: _sample(found, kind, key, samples) for kind in KINDS}
    finally:
        found.unpersist()
    return TableDiff(
        table,
        key,
        {"live": live.count(), "shadow": shadow.count()},
        {kind: counts.get(kind, 0) for kind in KINDS},
        {r["c"]: int(r["count"]) for r in sorted(by_column)},
        shown,
        {
            "live": [c for c in live.columns if c not in shadow.columns],
            "shadow": [c for c in shadow.columns if c not in live.columns],
        },
    )


def _differs(left: Column, right: Column, kind: Any) -> Column:
    """Whether two values differ: null-safe; doubles within `RELATIVE_TOLERANCE`."""
    if not isinstance(kind, DoubleType | FloatType):
        return ~left.eqNullSafe(right)
    scale = F.greatest(F.abs(left), F.abs(right), F.lit(1.0))
    return (
        F.when(left.isNull() | right.isNull(), ~left.eqNullSafe(right))
        .when(F.isnan(left) | F.isnan(right), ~left.eqNullSafe(right))
        .otherwise(F.abs(left - right) > F.lit(RELATIVE_TOLERANCE) * scale)
    )


def _sample(found: DataFrame, kind: str, key: tuple[str, ...], n: int) -> list[dict[str, Any]]:
    rows = found.where(F.col("_kind") == kind).orderBy(*key).limit(n).collect()
    shown = []
    for row in rows:
        values = row.asDict()
        named = [c for c in values["_differs"]] if kind == "changed" else []
        shown.append(
            {
                "key": {k: _plain(values[k]) for k in key},
                "columns": {c: [_plain(values[f"l_{c}"]), _plain(values[f"s_{c}"])] for c in named},
            }
        )
    return shown


def _plain(value: Any) -> Any:
    return value if value is None or isinstance(value, bool | int | float | str) else str(value)


@dataclass(frozen=True)
class Comparison:
    """Every compared table's differences, at the input both versions read."""

    where: shadow.Where
    tables: list[TableDiff]

    @property
    def equal(self) -> bool:
        return all(t.equal for t in self.tables)

    def as_json(self) -> dict[str, Any]:
        return {
            "where": self.where.as_json(),
            "equal": self.equal,
            "tables": [{**asdict(t), "equal": t.equal} for t in self.tables],
        }


class NotComparable(Exception):
    """The versions have not read the same input (yet): the message says how they differ."""


def compare(spark: SparkSession, settings: Settings, wait_s: float = 0.0) -> Comparison:
    """The versions compared once they read the same input; NotComparable if they do not
    within `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        now = stored.read(settings)
        live, other = (
            pipeline.at_tags(settings, now.tags(False)),
            shadow.other_settings(settings, now),
        )
        names = [t for t in pipeline.COMPARED if _part(t) in now.parts]
        pinned = _pin(spark, names, live, other)
        where = shadow.where(spark, settings)
        if where.same_input is None and _pin(spark, names, live, other) == pinned:
            break
        if time.monotonic() > deadline:
            raise NotComparable(where.same_input or "a batch committed while the compare looked")
        time.sleep(5)
    diffs = [
        table_diff(name, _at(spark, pinned[name][0]), _at(spark, pinned[name][1]), key)
        for name, key in pipeline.COMPARED.items()
        if name in pinned
    ]
    return Comparison(where, diffs)


def _part(table: str) -> str:
    return next(part for part, names in pipeline.VERSIONED.items() if table in names)


def _pin(
    spark: SparkSession, names: list[str], live: Settings, other: Settings
) -> dict[str, tuple[tuple[str, int], tuple[str, int]]]:
    """Table -> (location, version) on each side, for the tables there are on both."""
    pinned = {}
    for name in names:
        sides = [s.storage.table_uri(name) for s in (live, other)]
        if all(catalog.is_delta(spark, uri) for uri in sides):
            left, right = ((uri, delta.latest(spark, uri).version) for uri in sides)
            pinned[name] = (left, right)
    return pinned


def _at(spark: SparkSession, pinned: tuple[str, int]) -> DataFrame:
    location, version = pinned
    return spark.read.format("delta").option("versionAsOf", version).load(location)
