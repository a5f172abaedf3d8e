"""silver.violations: one row per rejected record: why, expected vs found seq, raw bytes."""

from __future__ import annotations

from typing import Any

from lakehouse.core.tables import LINEAGE_COLUMNS, TableSpec
from silver.session_state import Violation

TABLE = TableSpec(
    name="silver.violations",
    grain="one row per rejected record",
    columns=f"""
        session_id STRING COMMENT 'session id the record names; null if it names no usable one',
        sensor_id STRING
            COMMENT 'sensor its Kafka topic names; null if the record names no usable session',
        reason STRING NOT NULL
            COMMENT 'why it was rejected, e.g. unparsable, invalid, gap, duplicate, after_end',
        detail STRING COMMENT 'what was wrong, naming the field or the seqs involved',
        expected_seq BIGINT
            COMMENT 'seq the session expected next when the record came; null where none applies',
        found_seq BIGINT COMMENT 'seq the record carried; null if it had no readable one',
        raw_value BINARY COMMENT 'the Kafka value of the record, bytes as bronze holds them',
        batch_id BIGINT NOT NULL COMMENT 'micro-batch of the silver stream that wrote the row',
        {LINEAGE_COLUMNS}
    """,
    writer="the silver stream",
    change_feed=True,  # gold reads it incrementally
)
NAME = TABLE.name


def row(violation: Violation) -> dict[str, Any]:
    """A rejected record's columns, with the Kafka lineage to find it in bronze."""
    return {
        "session_id": violation.session_id,
        "sensor_id": violation.sensor_id,
        "reason": str(violation.reason),
        "detail": violation.detail,
        "expected_seq": violation.expected_seq,
        "found_seq": violation.found_seq,
        "raw_value": violation.raw,
        **violation.lineage.columns(),
    }
