"""Records read in the JVM read as the protocol's own parser reads them, or go to it.

Every hostile record of the corpus, its good neighbours and the cases where Spark's
`from_json` is lenient run through `silver.parsing` in Spark and through
`parse_record` in Python: a record marked `plain` must be one Python accepts, with the
same values to the bit."""

# ruff: noqa: E501  (the cases are a table: one per line)
from __future__ import annotations

import json
import math
from typing import Any

import pytest
from pyspark.sql import SparkSession

from silver.parsing import keyed_records
from silver.session_state import Lineage, Record, parse_record
from tests.support.hostile import CASES, PREFIX, SENSOR, TOPIC, hostile_messages

pytestmark = pytest.mark.integration

GOOD = hostile_messages(999, CASES[-1])[0][1].decode()
UPDATE = json.loads(hostile_messages(999, CASES[-1])[2][1])
LENIENT_IN_SPARK = [
    # what from_json reads without complaint and Python rejects (or reads otherwise)
    json.dumps(UPDATE).replace('"temperature": 30.0', '"temperature": 30.0, "temperature": 1'),
    json.dumps(UPDATE) + " {}",
    json.dumps(UPDATE) + " x",
    json.dumps(UPDATE).replace('"seq"', '"s\\u0065q"'),
    json.dumps(UPDATE).replace('"seq": 2', '"seq" : 2'),
    json.dumps(UPDATE).replace('"seq": 2', '"seq": 2.0'),
    json.dumps(UPDATE).replace('"temperature": 30.0', '"temperature": -0.0'),
    json.dumps(UPDATE).replace('"temperature": 30.0', '"temperature": 1e400'),
    json.dumps(UPDATE).replace('"temperature": 30.0', '"temperature": "NaN"'),
    json.dumps(UPDATE).replace('"counter": 1', '"counter": 1.0'),
    json.dumps(UPDATE).replace('"status": "ok"', '"status": null'),
    json.dumps(UPDATE).replace('"status": "ok"', '"status": "o\\u006b"'),
    json.dumps(UPDATE).replace('"row_id": "r1"', '"row_id": ["r1"]'),
    json.dumps({**UPDATE, "event_time": "2026-03-01T00:00:01.1234567Z"}),
    json.dumps({**UPDATE, "event_time": "2026-02-30T00:00:01Z"}),
    json.dumps({**UPDATE, "event_time": "2026-03-01T00:00:01+24:00"}),
    json.dumps({**UPDATE, "event_time": "2026-03-01T00:00:01.5-03:30"}),
    json.dumps({**UPDATE, "kind": "end"}),
    json.dumps({**UPDATE, "op": "delete", "row_id": "r1"}),
    json.dumps({**UPDATE, "kind": "snapshot", "rows": []}),
    json.dumps({**UPDATE, "kind": "snapshot", "rows": [{"row_id": "a", "values": {}}, {}]}),
    json.dumps({**UPDATE, "kind": "snapshot", "rows": [{"row_id": "a", "values": {"counter": 2**63 - 1}}]}),
    " " + json.dumps(UPDATE) + "\n",
    json.dumps(UPDATE, separators=(",", ":")),
]  # fmt: skip


def records() -> list[tuple[bytes | None, bytes]]:
    found = [m for i, case in enumerate(CASES) for m in hostile_messages(i, case)]
    key = UPDATE["session_id"].encode()
    return found + [(key, text.encode()) for text in LENIENT_IN_SPARK]


def same(a: Any, b: Any) -> bool:
    """Equal to the bit: -0.0 is not 0.0."""
    if isinstance(a, float) and isinstance(b, float):
        return math.copysign(1, a) == math.copysign(1, b) and a == b
    return type(a) is type(b) and a == b


def test_a_plain_record_reads_in_the_jvm_as_the_protocols_parser_reads_it(
    spark: SparkSession,
) -> None:
    sent = records()
    bronze = spark.createDataFrame(
        [(TOPIC, 0, offset, k, v, None, None, None) for offset, (k, v) in enumerate(sent)],
        "topic STRING, partition INT, offset BIGINT, key BINARY, value BINARY, "
        "kafka_timestamp TIMESTAMP, kafka_timestamp_type INT, ingested_at TIMESTAMP",
    )
    keyed = {row.offset: row for row in keyed_records(bronze, PREFIX).collect()}

    # each hostile record's snapshot before it and update after it: ordinary records
    good = {i for i in range(3 * len(CASES)) if i % 3 != 1}
    for offset, (key, value) in enumerate(sent):
        row = keyed[offset]
        python = parse_record(row.session_id, value, Lineage(TOPIC, 0, offset), key, SENSOR)
        if not row.plain:
            assert offset not in good, f"an ordinary record left to Python: {value!r}"
            assert row.value == value, "a record Python parses must keep its bytes"
            assert json.loads(row.reading)["detail"] == python.detail
            continue
        assert row.reading is None
        assert python.problem is None, (value, python.detail)
        assert_same_record(python, row)


def assert_same_record(python: Record, row: Any) -> None:
    for name in ("sensor_id", "seq", "kind", "event_time"):
        assert same(getattr(row, name), getattr(python, name)), name
    if python.kind == "snapshot":
        assert python.rows is not None
        assert [item.row_id for item in row["items"]] == list(python.rows)
        for item in row["items"]:
            assert_same_values(item.values, python.rows[item.row_id])
    elif python.kind == "update":
        (item,) = row["items"]
        assert (row.op, item.row_id) == (python.op, python.row_id)
        if python.op == "upsert":
            assert python.values is not None
            assert_same_values(item.values, python.values)


def assert_same_values(found: Any, values: dict[str, Any]) -> None:
    for name, expected in values.items():
        assert same(found[name], expected), (name, found[name], expected)
