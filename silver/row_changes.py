"""silver.row_changes: one row per table row changed by an accepted record.

The changelog of every reconstructed table: replaying it in (session, seq, ordinal)
order rebuilds `silver.session_rows`; `ordinal` numbers the rows one record changed.
"""

from __future__ import annotations

from typing import Any

from lakehouse.tables import LINEAGE_COLUMNS, TableSpec
from silver import protocol
from silver.session_machine import RowChange

TABLE = TableSpec(
    name="silver.row_changes",
    grain="one row per table row changed by an accepted record",
    columns=f"""
        session_id STRING NOT NULL, sensor_id STRING, row_id STRING NOT NULL,
        op STRING NOT NULL, {protocol.VALUE_COLUMNS}, seq BIGINT NOT NULL,
        ordinal BIGINT NOT NULL, event_time TIMESTAMP, batch_id BIGINT NOT NULL,
        {LINEAGE_COLUMNS}
    """,
    writer="the silver stream",
    change_feed=True,  # gold reads it incrementally
)
NAME = TABLE.name


def row(change: RowChange) -> dict[str, Any]:
    """A change's columns; `op` is insert | update | delete | snapshot."""
    return {
        "session_id": change.session_id,
        "sensor_id": change.sensor_id,
        "row_id": change.row_id,
        "op": change.op,
        **(change.values or {}),
        "seq": change.seq,
        "event_time": change.event_time,
        **change.lineage.columns(),
    }
