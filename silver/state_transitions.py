"""silver.state_transitions: one row per record of a traced session: the state before and
after it (`--trace`), for finding where a reconstruction went wrong."""

from __future__ import annotations

import json
from typing import Any

from lakehouse.core.tables import LINEAGE_COLUMNS, TableSpec
from silver.session_state import Transition

TABLE = TableSpec(
    name="silver.state_transitions",
    grain="one row per record of a traced session",
    columns=f"""
        sensor_id STRING COMMENT 'sensor of the session: the one its Kafka topic names',
        session_id STRING NOT NULL
            COMMENT 'session id as the sensor sent it (the Kafka key); unique per sensor only',
        seq BIGINT COMMENT 'seq the record carried; null if it had no readable one',
        ordinal BIGINT NOT NULL
            COMMENT 'number of the row among those its record produced in this table, from 0',
        action STRING NOT NULL
            COMMENT 'what the record did: apply, apply-after-gap, resync, buffer, reject:<reason>',
        before STRING
            COMMENT 'session before the record, JSON: status, last_seq, rows, records, rejected',
        after STRING COMMENT 'the session after the record, as JSON, in the shape of before',
        batch_id BIGINT NOT NULL COMMENT 'micro-batch of the silver stream that wrote the row',
        {LINEAGE_COLUMNS}
    """,
    writer="the silver stream",
)
NAME = TABLE.name


def row(transition: Transition) -> dict[str, Any]:
    """A transition's columns; `before`/`after` are JSON summaries of the session."""
    return {
        "sensor_id": transition.sensor_id,
        "session_id": transition.session_id,
        "seq": transition.seq,
        "action": transition.action,
        "before": json.dumps(transition.before),
        "after": json.dumps(transition.after),
        **transition.lineage.columns(),
    }
