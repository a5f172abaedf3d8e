"""silver.state_transitions: one row per record of a traced session: the state before and
after it (`--trace`), for finding where a reconstruction went wrong."""

from __future__ import annotations

import json
from typing import Any

from lakehouse.tables import LINEAGE_COLUMNS, TableSpec
from silver.session_machine import Transition

TABLE = TableSpec(
    name="silver.state_transitions",
    grain="one row per record of a traced session",
    columns=f"""
        sensor_id STRING, session_id STRING NOT NULL, seq BIGINT, ordinal BIGINT NOT NULL,
        action STRING NOT NULL,
        before STRING, after STRING, batch_id BIGINT NOT NULL, {LINEAGE_COLUMNS}
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
