"""Tables by name: one frozen declaration per table, and one resolver from name to place.

A table is declared once, next to the code that fills it (`bronze/sensor_records.py`
declares `bronze.sensor_records`). Every caller finds a table's data and its stream
checkpoint from its dotted name through `StorageSettings`, so there is one shape of
address in the code: `<layer>.<table>`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

LINEAGE_COLUMNS = (
    "topic STRING NOT NULL COMMENT 'Kafka topic of the record the row comes from', "
    "partition INT NOT NULL COMMENT 'Kafka partition of that record', "
    "offset BIGINT NOT NULL COMMENT 'Kafka offset of that record in its partition'"
)
"""The Kafka record a row comes from: every table below bronze carries it."""

CHANGE_FEED = {"delta.enableChangeDataFeed": "true"}
"""The property of tables that gold reads incrementally, through Delta's change data feed."""


@dataclass(frozen=True)
class TableSpec:
    """One Delta table: its name (`<layer>.<table>`), grain, columns in Spark SQL DDL,
    table properties, clustering, whether gold reads its change feed, and the one
    application that writes it."""

    name: str
    grain: str
    columns: str
    writer: str
    properties: Mapping[str, str] = field(default_factory=dict)
    cluster_by: tuple[str, ...] = ()
    change_feed: bool = False

    @property
    def layer(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def table_properties(self) -> dict[str, str]:
        return {**self.properties, **(CHANGE_FEED if self.change_feed else {})}

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in columns_of(self.columns)]


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    """Spark SQL type as declared, e.g. `BIGINT`, `ARRAY<STRING>`."""
    description: str = ""
    """What a value means: the column's `COMMENT`, shown by `DESCRIBE` and the report."""


_COMMENT = re.compile(r"\bCOMMENT\s+'((?:[^'\\]|\\.|'')*)'\s*$", re.I | re.S)


def columns_of(ddl: str) -> list[Column]:
    """The columns of a DDL column list, in order (types may hold commas: `MAP<K, V>`,
    comments anything but a lone quote)."""
    columns, depth, start, quoted = [], 0, 0, False
    for i, char in enumerate(ddl + ","):
        if char == "'":
            quoted = not quoted  # '' inside a comment flips twice
        elif quoted:
            continue
        elif char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        elif char == "," and depth == 0:
            name, _, rest = ddl[start:i].strip().partition(" ")
            if name:
                kind = re.split(r"\s+(?:NOT\s+NULL|COMMENT)\b", rest.strip(), maxsplit=1)[0]
                comment = _COMMENT.search(rest.strip())
                described = comment[1].replace("''", "'").replace("\\'", "'") if comment else ""
                columns.append(Column(name, kind, described))
            start = i + 1
    return columns
