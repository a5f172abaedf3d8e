"""silver.violations: one row per rejected record: why, expected vs found seq, raw bytes."""

from __future__ import annotations

from typing import Any

from lakehouse.tables import LINEAGE_COLUMNS, TableSpec
from silver.session_machine import Violation

TABLE = TableSpec(
    name="silver.violations",
    grain="one row per rejected record",
    columns=f"""
        session_id STRING, sensor_id STRING, reason STRING NOT NULL, detail STRING,
        expected_seq BIGINT, found_seq BIGINT, raw_value BINARY, batch_id BIGINT NOT NULL,
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
