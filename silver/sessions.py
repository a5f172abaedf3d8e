"""silver.sessions: one row per session: status, seq range, counts, times, lineage.

`topic`/`partition`/`offset` are the lineage of the last record that changed the
session; `first_*` of the first.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame

from lakehouse import delta
from lakehouse.delta import Txn
from lakehouse.tables import LINEAGE_COLUMNS, TableSpec
from silver.session_machine import SessionState

TABLE = TableSpec(
    name="silver.sessions",
    grain="one row per session: (sensor_id, session_id)",
    columns=f"""
        sensor_id STRING NOT NULL, session_id STRING NOT NULL, status STRING NOT NULL,
        first_seq BIGINT, last_seq BIGINT, records BIGINT NOT NULL, snapshots BIGINT NOT NULL,
        updates BIGINT NOT NULL, rejected BIGINT NOT NULL,
        gaps BIGINT NOT NULL COMMENT 'times seq skipped ahead of the next expected one',
        table_rows BIGINT NOT NULL, first_event_time TIMESTAMP, last_event_time TIMESTAMP,
        first_topic STRING, first_partition INT, first_offset BIGINT,
        updated_batch_id BIGINT NOT NULL, {LINEAGE_COLUMNS}
    """,
    writer="the silver stream",
    change_feed=True,  # gold reads it incrementally
)
NAME = TABLE.name
KEY = ("sensor_id", "session_id")
"""A session: two sensors may number their sessions alike."""


def row(session: SessionState) -> dict[str, Any]:
    """A session's columns as it stands after the batch."""
    first = session.first_lineage
    return {
        "sensor_id": session.sensor_id,
        "session_id": session.session_id,
        "status": str(session.status),
        "first_seq": session.first_seq,
        "last_seq": session.last_seq,
        "records": session.records,
        "snapshots": session.snapshots,
        "updates": session.updates,
        "rejected": session.rejected,
        "gaps": session.gaps,
        "table_rows": session.table_rows,
        "first_event_time": session.first_event_time,
        "last_event_time": session.last_event_time,
        "first_topic": first.topic if first else None,
        "first_partition": first.partition if first else None,
        "first_offset": first.offset if first else None,
        **(session.last_lineage.columns() if session.last_lineage else {}),
    }


def write(touched: DataFrame, path: str, txn: Txn, rebuild: bool = False) -> None:
    """Upsert the sessions a batch touched (`rebuild`: they are all there are)."""
    if rebuild:
        delta.replace(touched, path, txn)
    else:
        delta.merge(touched, path, KEY, txn)
