"""Bronze records read by the protocol in the JVM: typed columns, one row per table row.

`from_json` reads each value once, with the protocol's schema, into typed columns. It is
lenient where the protocol is strict (a repeated key, a number where a string belongs,
trailing bytes), so a record counts as `plain` only where cheap checks on its text prove
that the strict reading (`silver.protocol`) would find the same values:

- the text is UTF-8, and one pass over its bytes (`JsonKeys`, in `jvm/src`) finds one
  object and nothing after it, no key spelled with an escape, no string field holding a
  non-string, and counts its keys;
- that count equals the typed fields that came out non-null: no key repeated, none
  unknown, none null, none of a JSON type the schema could not read (`3.0` for an
  integer, `"hot"` for a number);
- every typed value keeps its field's rule, checked as SQL generated from the protocol.

Plain records reach the session machine in the JVM as typed columns, a snapshot's rows
as an array; any other record is read by the protocol's own parser, which names what is
wrong, in a Python UDF that the plain ones cross as nulls but for their sensor. A rule
these checks cannot prove costs that record speed, never a different answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from bronze import kafka_changes
from silver import protocol
from silver.protocol import Field, FieldType

UNKEYED = ""
"""The session id of records that name no usable one: rejected with their sensor's, no state."""

_SQL_TYPES = {**protocol.SPARK_TYPES, FieldType.TIMESTAMP: "STRING"}
"""As the tables type them, but times as their text: read by the protocol's format."""
VALUES = protocol.VALUE_FIELDS
_VALUES_TYPE = ", ".join(f"{f.name}: {_SQL_TYPES[f.type]}" for f in VALUES)
_ROW_TYPE = f"STRUCT<row_id: STRING, values: STRUCT<{_VALUES_TYPE}>>"
SCHEMA = ", ".join(
    [
        *(f"{f.name} {_SQL_TYPES[f.type]}" for f in (*protocol.ENVELOPE, protocol.OP)),
        f"row_id STRING, row {_ROW_TYPE}, rows ARRAY<{_ROW_TYPE}>",
    ]
)
"""Every field the protocol names, at its place in a message, in Spark SQL DDL."""

_STRING_FIELDS = sorted(
    {f.name for f in (*protocol.ENVELOPE, protocol.OP, protocol.ROW_ID, *VALUES)
     if _SQL_TYPES[f.type] == "STRING"}
)  # fmt: skip
JSON_KEYS = "lakehouse_json_keys"
"""`jvm/src/lakehouse/json/JsonKeys.java`: a value's key count in one pass, or -1."""
_TIMESTAMP = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?(?:Z|[+-]\d{2}:\d{2})$"
"""The protocol's time format, with at most microseconds (more digits: Python decides)."""
_LOW, _HIGH = (int(t.timestamp()) * 1_000_000 for t in protocol.EVENT_TIME_RANGE)


def holds(field: Field, value: Column) -> Column:
    """Whether a typed value keeps `field`'s rule (null where the field may be missing)."""
    if field.type is FieldType.STRING:
        if field.choices:
            rule = value.isin(*field.choices)
        else:
            rule = value.rlike(rf"^[^\x00-\x1f\x7f-\x9f]{{1,{field.max_length}}}$")
    elif field.type is FieldType.INTEGER:
        rule = value.between(F.lit(field.minimum), F.lit(field.maximum))
    elif field.type is FieldType.TIMESTAMP:
        rule = value.between(F.lit(_LOW), F.lit(_HIGH - 1))
    else:
        rule = ~F.isnan(value) & (F.abs(value) != F.lit(float("inf")))
    return F.coalesce(value.isNull() & F.lit(field.optional) | rule, F.lit(False))


def _timestamp_micros(text: Column) -> Column:
    """Microseconds since the epoch, UTC, of a time in the protocol's format; null where
    Spark cannot read it as Python does."""
    return F.when(text.rlike(_TIMESTAMP), F.unix_micros(F.try_to_timestamp(text)))


def _all(rules: Iterable[Column]) -> Column:
    result = F.lit(True)
    for rule in rules:
        result = result & rule
    return result


def _present(columns: Iterable[Column]) -> Column:
    total = F.lit(0)
    for column in columns:
        total = total + column.isNotNull().cast("int")
    return total


def _row_keys(row: Column) -> Column:
    """Keys of a row object that came out non-null: row_id, values and each value."""
    values = row["values"]
    return F.coalesce(
        _present([row["row_id"], values]) + _present(values[f.name] for f in VALUES),
        F.lit(0),
    )


def _values_hold(values: Column) -> Column:
    return F.coalesce(
        values.isNotNull() & _all(holds(f, values[f.name]) for f in VALUES), F.lit(False)
    )


def keyed_records(bronze: DataFrame, topic_prefix: str) -> DataFrame:
    """One row per bronze record, keyed by session, for the session machine in the JVM:
    a plain record's envelope and its rows (`items`: row_id and values), and for the
    others their bytes (`key`, `value`) and the protocol's reading of them (`reading`)."""
    _register(bronze.sparkSession)
    # In stages, each a projection of its own: Spark would otherwise evaluate the parse and
    # the rules again inside every expression that uses them.
    keyed = _keyed(_judged(_checked(_read(bronze), topic_prefix)), topic_prefix)
    readable = F.when(~F.col("plain"), F.col("session_id"))
    return keyed.withColumn("reading", _protocol_reading(readable, "key", "value", "sensor_id"))


@F.pandas_udf(StringType())  # type: ignore[call-overload]
def _protocol_reading(
    session_ids: pd.Series, keys: pd.Series, values: pd.Series, sensors: pd.Series
) -> pd.Series:
    """A record that is not plain as the protocol reads it (`silver.session_machine.
    parse_record`), as JSON; null for plain records, whose session id comes as null.

    Every row crosses into Python, a plain one as nulls but for its sensor id: 0.05 s over
    300,000 records (docs/benchmarks.md)."""
    from silver.session_state import Lineage, parse_record

    def reading(session_id: Any, key: Any, value: Any, sensor: str) -> str | None:
        if not isinstance(session_id, str):
            return None
        record = parse_record(
            session_id, value, Lineage("", 0, 0), key if isinstance(key, bytes) else None, sensor
        )
        return json.dumps(
            {
                "problem": None if record.problem is None else str(record.problem),
                "detail": record.detail,
                "sensor_id": record.sensor_id,
                "seq": record.seq,
                "kind": record.kind,
                "event_time": record.event_time,
                "op": record.op,
                "row_id": record.row_id,
                "values": record.values,
                "rows": None if record.rows is None else list(record.rows.items()),
            },
            allow_nan=False,
        )

    return pd.Series(
        [reading(*r) for r in zip(session_ids, keys, values, sensors, strict=True)], dtype=object
    )


def _register(spark: SparkSession) -> None:
    # Once per session: a new checkpoint's first run parses, then its steady run again, and
    # a second registration replaces the first with the warning a clash of names would get.
    if not spark.catalog.functionExists(JSON_KEYS):
        spark.udf.registerJavaFunction(JSON_KEYS, "lakehouse.json.JsonKeys", "INT")


def _read(bronze: DataFrame) -> DataFrame:
    """The value as text and as the protocol's typed message `m` (leniently read)."""
    text = F.col("value").cast("string")
    return bronze.select(
        "topic",
        "partition",
        "offset",
        "kafka_timestamp",
        # A producer stamps its records (CreateTime, type 0): its clock may run ahead of
        # the pipeline's. A record cannot have been sent after bronze ingested it, so its
        # time counts for the stream's data clock only up to then. The broker's own time
        # (LogAppendTime) counts as it is; no timestamp moves no clock.
        F.when(F.col("kafka_timestamp_type") == 0, F.least("kafka_timestamp", "ingested_at"))
        .otherwise(F.col("kafka_timestamp"))
        .alias("clock_timestamp"),
        "key",
        "value",
        text.alias("text"),
        F.from_json(text, SCHEMA, {"allowNonNumericNumbers": "false"}).alias("m"),
    )


def topic_sensor(topic_prefix: str) -> Column:
    """The sensor a record's topic names: its suffix after the prefix (the whole topic if
    it lacks the prefix, which the pattern that discovers topics rules out), without the
    `~N` bronze names a re-created topic's N-th incarnation by."""
    topic = kafka_changes.kafka_topic_of(F.col("topic"))
    return F.when(
        topic.startswith(topic_prefix), F.substring(topic, len(topic_prefix) + 1, 1 << 20)
    ).otherwise(topic)


def _checked(read: DataFrame, topic_prefix: str) -> DataFrame:
    """The message's fields as columns, whether its scalars keep the protocol's rules
    (`scalars_hold`), and its keys as counted in the text and as typed."""
    m = F.col("m")
    envelope = {f.name: m[f.name] for f in protocol.ENVELOPE}
    envelope["event_time"] = _timestamp_micros(envelope["event_time"])
    kind, op, row_id, row = (m[c] for c in ("kind", "op", "row_id", "row"))
    scalar_keys = _present(m[f.name] for f in (*protocol.ENVELOPE, protocol.OP, protocol.ROW_ID))
    row_keys = F.when(row.isNotNull(), 1 + _row_keys(row)).otherwise(0)
    update_holds = holds(protocol.OP, op) & F.when(
        op == "delete", holds(protocol.ROW_ID, row_id)
    ).otherwise(holds(protocol.ROW_ID, row["row_id"]) & _values_hold(row["values"]))
    prefixed = F.col("topic").startswith(topic_prefix)
    return read.select(
        "topic",
        "partition",
        "offset",
        "kafka_timestamp",
        "clock_timestamp",
        "key",
        "value",
        "text",
        *(c.alias(name) for name, c in envelope.items()),
        op.alias("op"),
        row_id.alias("row_id"),
        row.alias("row"),
        m["rows"].alias("rows"),
        (
            F.is_valid_utf8("value")
            & _all(holds(f, envelope[f.name]) for f in protocol.ENVELOPE)
            & (F.col("key").isNull() | (F.col("key") == F.encode(m["session_id"], "UTF-8")))
            & (~prefixed | (topic_sensor(topic_prefix) == m["sensor_id"]))
            & ((kind != "update") | update_holds)
        ).alias("scalars_hold"),
        F.call_udf(JSON_KEYS, "value", F.lit(",".join(_STRING_FIELDS))).alias("text_keys"),
        (scalar_keys + row_keys).alias("typed_keys"),
    )


def _judged(checked: DataFrame) -> DataFrame:
    """`plain`: the strict reading would find what the typed one did (snapshot rules take
    higher-order functions, which Spark evaluates without generated code: they get this
    projection of their own, so the others keep it)."""
    kind, rows = F.col("kind"), F.col("rows")
    row_ids = F.transform(rows, lambda r: r["row_id"])
    snapshot_holds = F.forall(
        rows, lambda r: holds(protocol.ROW_ID, r["row_id"]) & _values_hold(r["values"])
    ) & (F.size(F.array_distinct(row_ids)) == F.size(row_ids))
    snapshot_keys = F.when(
        rows.isNotNull(), 1 + F.aggregate(rows, F.lit(0), lambda n, r: n + _row_keys(r))
    ).otherwise(0)
    plain = (
        F.col("scalars_hold")
        & (F.col("text_keys") == F.col("typed_keys") + snapshot_keys)
        & ((kind != "snapshot") | snapshot_holds)
    )
    return checked.withColumn("plain", F.coalesce(plain, F.lit(False)))


def _keyed(judged: DataFrame, topic_prefix: str) -> DataFrame:
    """The session key, and what the state function reads: a plain record's fields and
    rows (`items`), the bytes of the others.

    A session is (sensor, session id), the sensor named by the topic, never by the value:
    two sensors may number their sessions alike, and no record on one sensor's topic can
    reach another's session. A record that is not plain is keyed by the session id it
    names, if usable, as the protocol's parser will judge it under that session."""
    plain, kind, op = F.col("plain"), F.col("kind"), F.col("op")
    named = F.get_json_object(F.col("text"), "$.session_id")
    session_id = F.when(plain, F.col("session_id")).otherwise(
        F.coalesce(F.when(named.rlike(protocol.ID_PATTERN), named), F.lit(UNKEYED))
    )
    row = F.col("row")
    single = F.array(
        F.struct(
            F.when(op == "delete", F.col("row_id")).otherwise(row["row_id"]).alias("row_id"),
            row["values"].alias("values"),
        )
    )
    items = F.when(plain & (kind == "snapshot"), F.col("rows")).when(
        plain & (kind == "update"), single
    )
    return judged.select(
        topic_sensor(topic_prefix).alias("sensor_id"),
        session_id.alias("session_id"),
        "topic",
        "partition",
        "offset",
        # never null from Kafka; were it, the record would not move its session's clock
        F.coalesce(F.unix_millis("kafka_timestamp"), F.lit(0)).alias("kafka_time"),
        F.coalesce(F.unix_millis("clock_timestamp"), F.lit(0)).alias("clock_time"),
        plain.alias("plain"),
        *(F.when(plain, F.col(c)).alias(c) for c in ("seq", "kind", "event_time", "op")),
        items.alias("items"),
        F.when(~plain, F.col("key")).alias("key"),
        F.when(~plain, F.col("value")).alias("value"),
    )
