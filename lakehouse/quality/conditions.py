"""Expectations as Spark conditions: which rows of a frame an expectation finds unexpected.

A stream judges single-row expectations in the pass that writes its batch, with the
conditions Great Expectations applies (`row_condition`; a test holds the two equal), and
quarantines by them; a failure is located by its first offending row in Kafka order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import reduce

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from lakehouse.core.errors import LakehouseError
from lakehouse.quality.suites import QUARANTINABLE, Check, Suite

BATCH_VIEW = "lakehouse_quality_batch"


def offending_rows(frame: DataFrame, check: Check, suite: Suite) -> DataFrame:
    """The rows of `frame` that `check` (a quarantinable expectation) finds unexpected."""
    if check.type == "unexpected_rows_expectation":
        frame.createOrReplaceTempView(BATCH_VIEW)
        query = check.kwargs["unexpected_rows_query"].replace("{batch}", BATCH_VIEW)
        keys = frame.sparkSession.sql(query)
        if missing := [c for c in suite.row_key if c not in keys.columns]:
            raise LakehouseError(
                f"{suite.path}: expectation {check.name!r} quarantines, so its query must "
                f"return the row key {list(suite.row_key)}; it lacks {missing}"
            )
        return frame.join(keys.select(*suite.row_key).distinct(), list(suite.row_key), "left_semi")
    return frame.where(F.coalesce(_unexpected(check), F.lit(False)))


_UNIQUENESS = ("expect_compound_columns_to_be_unique", "expect_column_values_to_be_unique")


def first_offending(frame: DataFrame, check: Check) -> str | None:
    """`topic/partition@offset` of the first row (in Kafka order) that `check` finds
    unexpected, or None where the expectation judges no rows or the frame has no lineage."""
    lineage = ["topic", "partition", "offset"]
    if not set(lineage) <= set(frame.columns):
        return None
    if check.type == "unexpected_rows_expectation":
        frame.createOrReplaceTempView(BATCH_VIEW)
        query = check.kwargs["unexpected_rows_query"].replace("{batch}", BATCH_VIEW)
        keys = frame.sparkSession.sql(query)
        shared = [c for c in keys.columns if c in frame.columns]
        if not shared:
            return None
        rows = frame.join(keys.select(*shared).distinct(), shared, "left_semi")
    elif check.type in (
        "expect_compound_columns_to_be_unique",
        "expect_column_values_to_be_unique",
    ):
        columns = list(check.kwargs.get("column_list") or [check.kwargs["column"]])
        repeated = frame.groupBy(*columns).count().where("count > 1").select(*columns)
        rows = frame.join(repeated, columns, "left_semi")
    elif check.type in QUARANTINABLE:
        rows = frame.where(F.coalesce(_unexpected(check), F.lit(False)))
    else:
        return None
    first = rows.select(*lineage).orderBy(*lineage).first()
    return None if first is None else f"{first.topic}/{first.partition}@{first.offset}"


_QUERY_OF_ROWS = re.compile(
    r"\s*SELECT\s+.+?\s+FROM\s+\{batch\}\s+WHERE\s+(?P<condition>.+?)[\s;]*", re.I | re.S
)
_NOT_ONE_ROW = re.compile(
    r"\b(SELECT|FROM|JOIN|GROUP|HAVING|OVER|WINDOW|LIMIT|UNION|ORDER|LAG|LEAD)\b", re.I
)
_ROW_KWARGS = {
    "expect_column_values_to_not_be_null": {"column"},
    "expect_column_values_to_be_in_set": {"column", "value_set"},
    "expect_column_values_to_be_between": {"column", "min_value", "max_value"},
    "unexpected_rows_expectation": {"unexpected_rows_query"},
}


def row_condition(check: Check) -> Column | None:
    """When one row is unexpected to `check`, where `check` judges each row on its own by
    a condition this module can state exactly as Great Expectations does; None otherwise
    (e.g. uniqueness, `mostly`, or a query with a window), which GX then evaluates.

    A query is row by row when it reads `SELECT ... FROM {batch} WHERE <condition>` with
    no subquery, join, grouping or window: its unexpected rows are those the condition
    holds for.
    """
    if not set(check.kwargs) <= _ROW_KWARGS.get(check.type, set()):
        return None
    if check.type != "unexpected_rows_expectation":
        return _unexpected(check)
    query = _QUERY_OF_ROWS.fullmatch(check.kwargs["unexpected_rows_query"])
    if query is None or _NOT_ONE_ROW.search(query["condition"]):
        return None
    return F.expr(query["condition"])


ROWS = "lakehouse_rows"
"""The count of a frame's rows among `unexpected_counts`."""


def unexpected_counts(frame: DataFrame, checks: Sequence[Check]) -> dict[str, int] | None:
    """How many rows of `frame` each of `checks` finds unexpected, as Great Expectations
    counts them, and the frame's rows (`ROWS`): one aggregate over the frame, plus a count
    per query that judges more than single rows. None if one of `checks` is not one this
    module counts exactly (`mostly`, a type it does not state), for GX to judge.

    Uniqueness counts every row whose key another row repeats; rows whose key values are
    all null are not judged, as GX ignores them."""
    counted: list[Column] = [F.count(F.lit(1)).alias(ROWS)]
    queries: dict[str, str] = {}
    judged = frame
    for i, check in enumerate(checks):
        if (condition := row_condition(check)) is not None:
            counted.append(F.count_if(F.coalesce(condition, F.lit(False))).alias(check.name))
        elif check.type in _UNIQUENESS and set(check.kwargs) <= {"column", "column_list"}:
            keys = list(check.kwargs.get("column_list") or [check.kwargs["column"]])
            repeats = f"lakehouse_repeats_{i}"
            judged = judged.withColumn(repeats, F.count(F.lit(1)).over(Window.partitionBy(*keys)))
            judged_key = ~reduce(Column.__and__, [F.col(k).isNull() for k in keys])
            counted.append(F.count_if((F.col(repeats) > 1) & judged_key).alias(check.name))
        elif check.type == "unexpected_rows_expectation" and set(check.kwargs) == {
            "unexpected_rows_query"
        }:
            queries[check.name] = check.kwargs["unexpected_rows_query"]
        else:
            return None
    found: dict[str, int] = judged.agg(*counted).collect()[0].asDict()
    if queries:
        frame.createOrReplaceTempView(BATCH_VIEW)
        for name, query in queries.items():
            found[name] = frame.sparkSession.sql(query.replace("{batch}", BATCH_VIEW)).count()
    return found


def any_of(conditions: Iterable[Column]) -> Column:
    """True where any of `conditions` is."""
    return reduce(Column.__or__, conditions, F.lit(False))


def without_rows(frame: DataFrame, rows: DataFrame, row_key: Sequence[str]) -> DataFrame:
    """`frame` less `rows`, matched by `row_key`, in `frame`'s column order."""
    keys = rows.select(*row_key).distinct()
    return frame.join(keys, list(row_key), "left_anti").select(*frame.columns)


def _unexpected(check: Check) -> Column:
    column = F.col(check.kwargs["column"])
    if check.type == "expect_column_values_to_not_be_null":
        return column.isNull()
    if check.type == "expect_column_values_to_be_in_set":
        return column.isNotNull() & ~column.isin(list(check.kwargs["value_set"]))
    low, high = check.kwargs.get("min_value"), check.kwargs.get("max_value")
    outside = [column < low] if low is not None else []
    outside += [column > high] if high is not None else []
    return any_of(outside)
