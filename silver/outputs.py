"""The rows silver's state function emits: one shape, derived from the tables they feed.

Each output row is a row of one table (`output` names it). Nearly all are row changes, so
the shape is `silver.row_changes`' columns, typed; a row of another table fills the
columns it shares with them and carries the rest as JSON text in `other`. Such rows are
few (a summary per touched session, rejected records, trace steps), while columns of their
own would be null on every row change and still cost the Arrow transfer and the batch's
cache. Two things differ from the tables: times travel as microseconds since the epoch
(`timestamp_micros` cannot fail on content, as a string cast can), and the batch id,
which only the writer knows, is added on the way out.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakehouse.core.tables import Column, TableSpec, columns_of
from lakehouse.storage import delta
from silver import row_changes, sessions, state_transitions, violations

OUTPUT_TABLES = (row_changes.TABLE, violations.TABLE, state_transitions.TABLE, sessions.TABLE)
_PANDAS = {"BIGINT": "Int64", "INT": "Int64", "DOUBLE": "float64", "BOOLEAN": "boolean"}


def _written_by_the_writer(column: Column) -> bool:
    return column.name.endswith("batch_id")


def _carried_as(column: Column) -> str:
    return "BIGINT" if column.type == "TIMESTAMP" else column.type


LATEST = "latest"
"""Beside a row change: whether it is its row's last change in the batch (by seq, offset,
ordinal), the one `silver.session_rows` is merged with."""


OTHER = "other"
"""Beside the shared columns, a row of a table other than `silver.row_changes`: its other
columns, as a JSON object (bytes in base64)."""


def _shape() -> dict[str, str]:
    shape = {"output": "STRING", LATEST: "BOOLEAN"}
    for column in columns_of(row_changes.TABLE.columns):
        if not _written_by_the_writer(column):
            shape[column.name] = _carried_as(column)
    for spec in OUTPUT_TABLES:
        for column in columns_of(spec.columns):
            kind = shape.get(column.name)
            if kind is not None and kind != _carried_as(column):
                raise TypeError(f"{spec.name}.{column.name} is {column.type}, elsewhere {kind}")
    return {**shape, OTHER: "STRING"}


SHAPE = _shape()
SCHEMA = ", ".join(f"{name} {kind}" for name, kind in SHAPE.items())
"""The state function's output schema, in Spark SQL DDL."""
DTYPES = {name: _PANDAS.get(kind, "object") for name, kind in SHAPE.items()}
"""Pandas types that Arrow converts to SCHEMA exactly."""


def _others() -> dict[str, str]:
    """Every column that travels in `other`, with its carried type."""
    return {
        c.name: _carried_as(c)
        for spec in OUTPUT_TABLES
        for c in columns_of(spec.columns)
        if c.name not in SHAPE and not _written_by_the_writer(c)
    }


OTHERS = _others()


def to_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Output rows as a frame typed inside the state function, where a failure can still
    become a violation, not after it."""
    # Column by column: a frame built from rows infers float64 for an integer column that
    # holds a None, and 2^63 - 1 does not survive the trip through a double.
    present = {name for row in rows for name in row}
    columns = {
        name: pd.array([row.get(name) for row in rows], dtype=dtype)
        if name in present
        else _column(None, len(rows), dtype)
        for name, dtype in DTYPES.items()
        if name != OTHER
    }
    for name in present & OTHERS.keys():  # typed too, for the same reason, then dropped
        pd.array([row.get(name) for row in rows], dtype=_PANDAS.get(OTHERS[name], "object"))
    columns[OTHER] = pd.array([_other(row) for row in rows], dtype="object")
    return pd.DataFrame(columns)


def _other(row: dict[str, Any]) -> str | None:
    found = {
        name: base64.b64encode(value).decode() if isinstance(value, bytes) else value
        for name, value in row.items()
        if name in OTHERS
    }
    return (
        json.dumps(found, allow_nan=False, separators=(",", ":"), default=_plain) if found else None
    )


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value JSON can write; anything else is a type error."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not a column value")


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


BATCH_ID = "batch_id"
"""The column the writer adds to a batch's outputs (`stamped`): its id, which each table's
batch column takes, so that the batch compiles it once, not once per table."""


def stamped(outputs: DataFrame, batch_id: int) -> DataFrame:
    """A batch's outputs with its id (`delta.stamped`), for `select` to take."""
    return delta.stamped(outputs, (BATCH_ID, "bigint", batch_id))


def select(outputs: DataFrame, spec: TableSpec) -> DataFrame:
    """The rows of `spec`'s table among the `stamped` outputs, in its columns and types."""
    carried = {c.name: OTHERS[c.name] for c in columns_of(spec.columns) if c.name in OTHERS}
    other = F.from_json(
        OTHER, ", ".join(f"`{n}` {'STRING' if t == 'BINARY' else t}" for n, t in carried.items())
    )

    def column(c: Column) -> SparkColumn:
        if _written_by_the_writer(c):
            return F.col(BATCH_ID).alias(c.name)
        value = F.col(c.name) if c.name in SHAPE else other[c.name]
        if c.type == "TIMESTAMP":
            return F.timestamp_micros(value).alias(c.name)
        if c.type == "BINARY":
            return F.unbase64(value).alias(c.name)
        return value.alias(c.name)

    rows = outputs.where(F.col("output") == spec.name)
    return rows.select(*[column(c) for c in columns_of(spec.columns)])
