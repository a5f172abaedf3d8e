"""silver.sessions: one row per session: status, seq range, counts, times, lineage.

`topic`/`partition`/`offset` are the lineage of the last record that changed the
session; `first_*` of the first.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame

from lakehouse.core.tables import LINEAGE_COLUMNS, TableSpec
from lakehouse.storage import delta
from lakehouse.storage.delta import Txn
from silver.session_state import SessionState

TABLE = TableSpec(
    name="silver.sessions",
    grain="one row per session: (sensor_id, session_id)",
    columns=f"""
        sensor_id STRING NOT NULL COMMENT 'sensor of the session: the one its Kafka topic names',
        session_id STRING NOT NULL
            COMMENT 'session id as the sensor sent it (the Kafka key); unique per sensor only',
        status STRING NOT NULL
            COMMENT 'open, closed (by an end), expired (timed out) or broken (until a snapshot)',
        first_seq BIGINT COMMENT 'seq of the first record applied; null if none was applied',
        last_seq BIGINT COMMENT 'highest seq applied so far; null if none was applied',
        records BIGINT NOT NULL COMMENT 'records of the session so far, accepted or rejected',
        snapshots BIGINT NOT NULL COMMENT 'snapshot records applied: the opening one and resyncs',
        updates BIGINT NOT NULL COMMENT 'update records applied (upserts and deletes)',
        rejected BIGINT NOT NULL
            COMMENT 'records of the session rejected, each a row of silver.violations',
        gaps BIGINT NOT NULL COMMENT 'times seq skipped ahead of the next expected one',
        table_rows BIGINT NOT NULL
            COMMENT 'rows of the reconstructed table now; as it ended once closed or expired',
        first_event_time TIMESTAMP
            COMMENT 'event_time of the first record with a readable one, even if rejected (UTC)',
        last_event_time TIMESTAMP
            COMMENT 'event_time of the latest record (Kafka order) with a readable one (UTC)',
        first_topic STRING COMMENT 'Kafka topic of the first record of the session',
        first_partition INT COMMENT 'Kafka partition of the first record of the session',
        first_offset BIGINT COMMENT 'Kafka offset of the first record of the session',
        updated_batch_id BIGINT NOT NULL
            COMMENT 'micro-batch of the silver stream that last wrote this row',
        {LINEAGE_COLUMNS}
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
