"""silver.row_changes: one row per table row changed by an accepted record.

The changelog of every reconstructed table: replaying it in Kafka order (partition,
offset, ordinal), each snapshot starting its session's table afresh, rebuilds
`silver.session_rows`; `ordinal` numbers the rows one record changed. Not in (session,
seq) order: a session id used again after its session was forgotten numbers from 0 again.
"""

from __future__ import annotations

from typing import Any

from lakehouse.core.tables import LINEAGE_COLUMNS, TableSpec
from silver import protocol
from silver.session_state import RowChange

TABLE = TableSpec(
    name="silver.row_changes",
    grain="one row per table row changed by an accepted record",
    columns=f"""
        session_id STRING NOT NULL
            COMMENT 'session id as the sensor sent it (the Kafka key); unique per sensor only',
        sensor_id STRING COMMENT 'sensor of the session: the one its Kafka topic names',
        row_id STRING NOT NULL COMMENT 'row of the session table, as the sensor names it',
        op STRING NOT NULL
            COMMENT 'insert (upsert of a new row), update (of a held row), delete, or snapshot row',
        {protocol.VALUE_COLUMNS},
        seq BIGINT NOT NULL COMMENT 'seq of the accepted record that made the change',
        ordinal BIGINT NOT NULL
            COMMENT 'number of the change among those its record made, from 0 (a snapshot: many)',
        event_time TIMESTAMP COMMENT 'event_time of the record that made the change (UTC)',
        batch_id BIGINT NOT NULL COMMENT 'micro-batch of the silver stream that wrote the row',
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
