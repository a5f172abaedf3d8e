"""`lakehouse explain SENSOR/SESSION`: one session's path through the layers, in one answer.

Every row below bronze carries the Kafka record it comes from, and the graph declares each
gold model's key and how input rows map to keys. So the question "where did this come from,
and what happened to it on the way" has an answer the lake already holds:

- **Kafka**: the session's records are in one partition of its sensor's topic (the session id
  is the key), from the first offset silver saw to the last. The broker is read over that
  range for the records keyed by the session, and bronze over the same range (its file
  statistics on topic, partition and offset skip every other file): each offset must be in
  bronze or its quarantine exactly once.
- **silver**: the session's row, each state transition (where silver ran with `--trace`), each
  violation with its reason and record, its rows now and the record each came from.
- **gold**: every row the session contributes to, found by each model's own `changed_keys`
  over the session's silver rows (a model reading another model gets the rows found for
  that one), with the run that last wrote it (the gold table's change feed gives the
  commit, whose metadata names its run) and that run's gate results.

Reads are by the session's key or its Kafka coordinates only; nothing scans a whole table
that file statistics can bound.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from bronze import kafka_changes, sensor_records
from lakehouse.core.errors import LakehouseError, explain
from lakehouse.core.settings import Settings
from lakehouse.ops.explain_gold import GoldRows, gold_rows
from lakehouse.ops.lake import Lake, rows_of
from lakehouse.quality import store
from lakehouse.services import kafka
from lakehouse.storage import delta
from silver import row_changes, session_rows, sessions, state_transitions, violations

LINEAGE = ("topic", "partition", "offset")
BRONZE_QUARANTINE = store.quarantine_table("bronze").name
SHORT_RUN = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m",
}
"""Spark settings of the command, which runs some twenty small queries once each and ends:
Spark interprets their plans rather than compiling classes for each, and the JVM compiles
with C1 alone, whose code is ready sooner than C2's (docs/benchmarks.md, explain)."""


@dataclass
class KafkaRecords:
    """The session's records in one partition, and how bronze holds them."""

    topic: str
    partition: int
    first_offset: int
    last_offset: int
    records: int
    """Offsets in the range whose record is the session's (by key, or as silver read it)."""
    first_timestamp: str | None
    last_timestamp: str | None
    in_bronze: int
    in_quarantine: int
    held_twice: list[int]
    """Offsets bronze and its quarantine hold more than once: never, if exactly once holds."""
    in_kafka: int | None
    """The session's records the broker holds in the range; None where it was not read."""
    missing: list[int]
    """Offsets the broker holds for the session that neither bronze table does."""
    kafka_note: str = ""

    @property
    def exactly_once(self) -> bool:
        """No record held twice, and none the broker holds missing (where it was read)."""
        return not self.held_twice and not self.missing


@dataclass
class Explanation:
    sensor: str
    session: str
    session_row: dict[str, Any] | None
    kafka: list[KafkaRecords]
    transitions: list[dict[str, Any]] | None
    """None: silver ran without `--trace` for this session."""
    violations: list[dict[str, Any]]
    changes_by_op: dict[str, int]
    rows_now: int
    rows: list[dict[str, Any]] | None
    """The session's rows with the record each came from (`--rows`)."""
    row_sources: dict[str, Any]
    gold: list[GoldRows]

    def to_dict(self) -> dict[str, Any]:
        """Plain data, with each Kafka range's verdict: what `--json` prints and the
        report's page reads."""
        found = asdict(self)
        for entry, records in zip(found["kafka"], self.kafka, strict=True):
            entry["exactly_once"] = records.exactly_once
        return found

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)


def explain_session(
    spark: SparkSession,
    settings: Settings,
    sensor: str,
    session: str,
    with_rows: bool = False,
) -> Explanation:
    """Everything the lake holds about `sensor`/`session`, read by its key and lineage."""
    read = Lake(spark, settings)
    mine = (F.col("sensor_id") == sensor) & (F.col("session_id") == session)
    reads = _silver_reads(read, mine, with_rows)
    found, rejected, transitions, changed, (sources,), listed = delta.side_by_side(reads)
    session_row = found[0].asDict() if found else None
    by_op: dict[str, int] = {}
    for op, _, _, count, _, _ in changed:
        by_op[op] = by_op.get(op, 0) + count
    ends = [(t, p, offset) for _, t, p, _, first, last in changed for offset in (first, last)]
    coordinates = _coordinates(session_row, rejected, ends)
    if session_row is None and not coordinates:
        raise LakehouseError(
            f"no session {sensor}/{session} in {sessions.NAME}, {violations.NAME} or "
            f"{row_changes.NAME}: is the sensor id the one its topic names?"
        )
    # Kafka's side and gold's are independent: the one waits on the broker, the other on
    # gold's tables.
    layers: list[Callable[[], Any]] = [
        lambda: [
            _kafka_records(read, session, topic, partition, bounds)
            for (topic, partition), bounds in sorted(coordinates.items())
        ],
        lambda: gold_rows(read, sensor, session),
    ]
    kafka_records, gold = delta.side_by_side(layers)
    return Explanation(
        sensor,
        session,
        session_row,
        kafka_records,
        transitions or None,
        rejected,
        by_op,
        sources["rows"],
        listed,
        {k: sources[k] for k in ("oldest_offset", "newest_offset", "records")},
        gold,
    )


def _silver_reads(read: Lake, mine: Column, with_rows: bool) -> list[Callable[[], Any]]:
    """What silver holds of the session: its row, violations, transitions, row changes by
    op and partition, its rows' lineage and (`with_rows`) the rows. Each is a small job on
    its own table: side by side, they wait on storage and the driver together."""
    rows = read(session_rows.NAME).where(mine)
    return [
        lambda: read(sessions.NAME).where(mine).collect(),
        lambda: rows_of(read(violations.NAME).where(mine).drop("raw_value"), LINEAGE),
        lambda: rows_of(read(state_transitions.NAME).where(mine), (*LINEAGE, "ordinal")),
        lambda: (
            read(row_changes.NAME)
            .where(mine)
            .groupBy("op", "topic", "partition")
            .agg(F.count(F.lit(1)), F.min("offset"), F.max("offset"))
            .collect()
        ),
        lambda: rows.agg(
            F.count(F.lit(1)).alias("rows"),
            F.min("offset").alias("oldest_offset"),
            F.max("offset").alias("newest_offset"),
            F.countDistinct(*LINEAGE).alias("records"),
        ).collect(),
        lambda: rows_of(rows, ("row_id",)) if with_rows else None,
    ]


def session_of_record(
    spark: SparkSession, settings: Settings, topic: str, partition: int, offset: int
) -> tuple[str, str]:
    """The (sensor, session) of one Kafka record, as silver reads it: the sensor its topic
    names, the session id its value names. Looked up in bronze, then in its quarantine."""
    read = Lake(spark, settings)
    at = (F.col("topic") == topic) & (F.col("partition") == partition) & (F.col("offset") == offset)
    kept = read(sensor_records.NAME).where(at).select("value").collect()
    if kept:
        value = kept[0].value
    else:
        caught = read(BRONZE_QUARANTINE).where(at & (F.col("table_name") == sensor_records.NAME))
        rows = caught.select("row_json").collect()
        if not rows:
            raise LakehouseError(
                f"neither bronze nor its quarantine holds {topic}/{partition}@{offset}"
            )
        value = _key_and_value(rows[0].row_json)[1]
    session = session_named(value)
    if session is None:
        raise LakehouseError(
            f"{topic}/{partition}@{offset} names no session: its value is not a JSON object "
            "with a session_id"
        )
    sensor = kafka_changes.kafka_topic(topic)[0].removeprefix(settings.kafka.topic_prefix)
    return sensor, session


def _coordinates(
    session: dict[str, Any] | None,
    violations: list[dict[str, Any]],
    changes: list[tuple[str, int, int]],
) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (first, last) offset of the session's records as silver saw
    them: its first and latest record, every violation, the bounds of its row changes."""
    seen = [(v["topic"], v["partition"], v["offset"]) for v in violations] + changes
    if session is not None:
        seen.append((session["first_topic"], session["first_partition"], session["first_offset"]))
        seen.append((session["topic"], session["partition"], session["offset"]))
    bounds: dict[tuple[str, int], tuple[int, int]] = {}
    for topic, partition, offset in seen:
        if topic is None:
            continue
        first, last = bounds.get((topic, partition), (offset, offset))
        bounds[(topic, partition)] = (min(first, offset), max(last, offset))
    return bounds


def _kafka_records(
    read: Lake,
    session: str,
    topic: str,
    partition: int,
    bounds: tuple[int, int],
) -> KafkaRecords:
    """The session's records in one partition's range, as bronze, its quarantine and the
    broker hold them. A record is the session's by the session id its value names, as
    silver reads it (a record's key does not decide; a value that is not JSON names none)."""
    first, last = bounds
    in_range = (
        (F.col("topic") == topic)
        & (F.col("partition") == partition)
        & F.col("offset").between(first, last)
    )
    named = F.get_json_object(F.col("value").cast("string"), "$.session_id") == F.lit(session)
    kept = read(sensor_records.NAME).where(in_range & named).select("offset", "kafka_timestamp")
    quarantined = read(BRONZE_QUARANTINE).where(
        in_range & (F.col("table_name") == sensor_records.NAME)
    )

    def ours(_: bytes | None, value: bytes | None) -> bool:
        return session_named(value) == session

    in_broker = partial(_in_broker, read.settings, topic, partition, bounds, ours)

    reads: list[Callable[[], Any]] = [
        lambda: [(r.offset, r.kafka_timestamp) for r in kept.collect()],
        lambda: [
            (r.offset, r.batch_id, _quarantined_time(r.row_json))
            for r in quarantined.select("offset", "batch_id", "row_json").collect()
            if ours(*_key_and_value(r.row_json))
        ],
        in_broker,
    ]
    in_bronze, caught, (in_kafka, note) = delta.side_by_side(reads)
    # One record caught by two expectations in one batch is one record quarantined; the
    # same record in two batches is a record held twice.
    in_quarantine = {(offset, batch): at for offset, batch, at in caught}
    offsets = Counter([o for o, _ in in_bronze] + [o for o, _ in in_quarantine])
    stamps = sorted(
        [t for _, t in in_bronze if t is not None]
        + [t for t in in_quarantine.values() if t is not None]
    )
    return KafkaRecords(
        topic,
        partition,
        first,
        last,
        len(set(offsets) | set(in_kafka or ())),
        stamps[0].isoformat() if stamps else None,
        stamps[-1].isoformat() if stamps else None,
        len(in_bronze),
        len(in_quarantine),
        sorted(o for o, n in offsets.items() if n > 1),
        None if in_kafka is None else len(in_kafka),
        sorted(set(in_kafka or ()) - set(offsets)),
        note,
    )


def _in_broker(
    settings: Settings,
    topic: str,
    partition: int,
    bounds: tuple[int, int],
    ours: Callable[[bytes | None, bytes | None], bool],
) -> tuple[list[int] | None, str]:
    """The offsets in `bounds` of the broker's records that are `ours`, or None and why not."""
    if kafka_changes.kafka_topic(topic)[1] > 1:  # a topic deleted and made again
        return None, f"not compared with Kafka: {topic} is an incarnation of a remade topic"
    try:
        return kafka.offsets_naming(settings, topic, partition, *bounds, ours)
    except Exception as error:  # the answer is bronze's then, said so in a line
        return None, f"not compared with Kafka: {explain(error)}"


def session_named(value: bytes | None) -> str | None:
    """The session id a record's value names, as silver reads it; None if it names none."""
    try:
        body = json.loads(bytes(value or b""))
    except ValueError:
        return None
    named = body.get("session_id") if isinstance(body, dict) else None
    return named if isinstance(named, str) else None


def _key_and_value(row_json: str) -> tuple[bytes | None, bytes | None]:
    """A quarantined bronze row's key and value (binary columns are base64 in its JSON)."""
    row = json.loads(row_json)
    return tuple(  # type: ignore[return-value]
        None if row.get(c) is None else base64.b64decode(row[c]) for c in ("key", "value")
    )


def _quarantined_time(row_json: str) -> datetime | None:
    """Its Kafka timestamp, in UTC without a zone, as Spark gives bronze's."""
    stamp = json.loads(row_json).get("kafka_timestamp")
    if not stamp:
        return None
    return datetime.fromisoformat(stamp).astimezone(UTC).replace(tzinfo=None)
