"""Kafka records as the broker holds them and as bronze keeps them, and the faults to send."""

from __future__ import annotations

from lakehouse.gameday import lake

FAULTS = {
    "gap": 2,
    "duplicate": 2,
    "reorder": 1,
    "malformed_json": 2,
    "missing_field": 1,
    "wrong_type": 1,
    "oversize": 1,
    "null_key": 2,
}


consume_all = lake.kafka_records
as_tuples = lake.as_tuples
quarantined_rows = lake.quarantined_rows
