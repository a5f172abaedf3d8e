"""The rows silver's state function emits: one shape, derived from the tables they feed.

Each output row is a row of one table (`output` names it), in that table's columns. A
column several tables share has one type in all of them, so one wide shape carries all
four: nothing here names a column by hand. Two things differ from the tables: times
travel as microseconds since the epoch (`timestamp_micros` cannot fail on content, as a
string cast can), and the batch id, which only the writer knows, is added on the way out.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakehouse.tables import Column, TableSpec, columns_of
from silver import row_changes, sessions, state_transitions, violations

TABLES = (row_changes.TABLE, violations.TABLE, state_transitions.TABLE, sessions.TABLE)
_PANDAS = {"BIGINT": "Int64", "INT": "Int64", "DOUBLE": "float64", "BOOLEAN": "boolean"}


def _written_by_the_writer(column: Column) -> bool:
    return column.name.endswith("batch_id")


def _carried_as(column: Column) -> str:
    return "BIGINT" if column.type == "TIMESTAMP" else column.type


LATEST = "latest"
"""Beside a row change: whether it is its row's last change in the batch (by seq, offset,
ordinal), the one `silver.session_rows` is merged with."""


def _shape() -> dict[str, str]:
    shape = {"output": "STRING", LATEST: "BOOLEAN"}
    for spec in TABLES:
        for column in columns_of(spec.columns):
            if _written_by_the_writer(column):
                continue
            kind = shape.setdefault(column.name, _carried_as(column))
            if kind != _carried_as(column):
                raise TypeError(f"{spec.name}.{column.name} is {column.type}, elsewhere {kind}")
    return shape


SHAPE = _shape()
SCHEMA = ", ".join(f"{name} {kind}" for name, kind in SHAPE.items())
"""The state function's output schema, in Spark SQL DDL."""
DTYPES = {name: _PANDAS.get(kind, "object") for name, kind in SHAPE.items()}
"""Pandas types that Arrow converts to SCHEMA exactly."""


def to_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Output rows as a frame typed inside the state function, where a failure can still
    become a violation, not after it."""
    # Column by column: a frame built from rows infers float64 for an integer column that
    # holds a None, and 2^63 - 1 does not survive the trip through a double.
    present = {name for row in rows for name in row}
    return pd.DataFrame(
        {
            name: pd.array([row.get(name) for row in rows], dtype=dtype)
            if name in present
            else _column(None, len(rows), dtype)
            for name, dtype in DTYPES.items()
        }
    )


def frame(columns: dict[str, Any], length: int) -> pd.DataFrame:
    """Output rows from whole columns (arrays, or one value for every row), the others
    null: built array by array, as a session's changes are many."""
    return pd.DataFrame(
        {name: _column(columns.get(name), length, dtype) for name, dtype in DTYPES.items()}
    )


def _column(values: Any, length: int, dtype: str) -> Any:
    if isinstance(values, np.ndarray | pd.api.extensions.ExtensionArray):
        return pd.array(values, dtype=dtype) if dtype in ("Int64", "boolean") else values
    if dtype == "Int64":
        empty = values is None
        return pd.arrays.IntegerArray(
            np.full(length, 0 if empty else values), np.full(length, empty)
        )
    if dtype == "boolean":
        empty = values is None
        return pd.arrays.BooleanArray(np.full(length, bool(values)), np.full(length, empty))
    if dtype == "float64":
        return np.full(length, np.nan if values is None else values, dtype="float64")
    return np.full(length, values, dtype=object)


def select(outputs: DataFrame, spec: TableSpec, batch_id: int) -> DataFrame:
    """The rows of `spec`'s table among the outputs, in its columns and types."""

    def column(c: Column) -> SparkColumn:
        if _written_by_the_writer(c):
            return F.lit(batch_id).cast("bigint").alias(c.name)
        if c.type == "TIMESTAMP":
            return F.timestamp_micros(c.name).alias(c.name)
        return F.col(c.name)

    rows = outputs.where(F.col("output") == spec.name)
    return rows.select(*[column(c) for c in columns_of(spec.columns)])
