"""`lakehouse status`: is the pipeline keeping up, and is its data fresh?

Everything is read from storage and the broker, never from a running job, so it answers
the same whether the streams run or not:
- each stream's last batch, from its progress table (`ops.progress`);
- Kafka lag per partition: the broker's end offsets minus the offsets of bronze's last
  committed batch in its checkpoint (Spark commits no consumer-group offsets, so Kafka's
  own tools see none);
- how far each incremental reader is behind what it reads: the silver stream behind
  bronze, each gold model behind its inputs, in versions and in rows;
- freshness: each table's newest Kafka timestamp or event time against the wall clock,
  by the rules of `status.freshness`: 0 all fresh, 1 a warning, 2 an error (the exit code).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bronze import kafka_changes
from lakehouse import catalog, positions, progress
from lakehouse.console import duration, size
from lakehouse.positions import Reader
from lakehouse.services.kafka import watermarks
from lakehouse.settings import FreshnessRule, Settings

Level = Literal["ok", "warn", "error"]
LEVELS: tuple[Level, ...] = ("ok", "warn", "error")
"""In order of gravity; a level's index is `lakehouse status`'s exit code."""


@dataclass(frozen=True)
class StreamState:
    """A stream's last batch, as its progress table keeps it."""

    node: str
    batch_id: int
    ended_at: datetime
    seconds_ago: float
    input_rows: int
    input_rows_per_second: float | None
    processed_rows_per_second: float | None
    batch_seconds: float
    state_rows: int | None
    state_memory_bytes: int | None


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    end_offset: int
    """The broker's: the offset its next record will get."""
    read_to: int | None
    """The next offset bronze reads; None if bronze has read nothing of it yet."""
    lag: int


@dataclass(frozen=True)
class ReaderLag:
    reader: str
    table: str
    versions_behind: int
    rows_behind: int
    """Rows the versions it has not read yet added, changed or deleted."""


@dataclass(frozen=True)
class Freshness:
    table: str
    column: str
    newest: datetime | None
    age_seconds: float | None
    level: Level


@dataclass
class Status:
    streams: list[StreamState] = field(default_factory=list)
    kafka: list[PartitionLag] = field(default_factory=list)
    kafka_error: str | None = None
    readers: list[ReaderLag] = field(default_factory=list)
    freshness: list[Freshness] = field(default_factory=list)
    kafka_changes: list[dict[str, Any]] = field(default_factory=list)
    """Changes in Kafka an operator accepted (bronze.kafka_changes), the latest first."""

    @property
    def level(self) -> Level:
        found = [f.level for f in self.freshness] + (["error"] if self.kafka_error else [])
        return max(found, key=LEVELS.index, default="ok")

    @property
    def exit_code(self) -> int:
        return LEVELS.index(self.level)

    def as_json(self) -> dict[str, Any]:
        return {**_jsonable(asdict(self)), "level": self.level}


def status(
    spark: SparkSession,
    settings: Settings,
    bronze_checkpoint: str,
    readers: Sequence[Reader],
    now: datetime | None = None,
) -> Status:
    """The pipeline's status as of `now`; `bronze_checkpoint` is the Kafka stream's."""
    now = now or datetime.now(UTC)
    found = Status(streams=stream_states(spark, settings, now))
    try:
        ends = watermarks(settings)
    except Exception as error:  # a broker down is part of the answer, not a crash
        found.kafka_error = str(error).splitlines()[0]
    else:
        read = positions.kafka_offsets(spark, settings.storage.checkpoint_uri(bronze_checkpoint))
        found.kafka = kafka_lag(ends, read)
    found.kafka_changes = kafka_changes.history(spark, settings)
    found.readers = readers_behind(spark, settings, readers)
    found.freshness = [freshness(spark, settings, rule, now) for rule in settings.status.freshness]
    return found


def stream_states(spark: SparkSession, settings: Settings, now: datetime) -> list[StreamState]:
    """Each stream's last recorded batch."""
    recorded = progress.read_progress(spark, settings.storage)
    if recorded is None:
        return []
    last = (
        recorded.where(F.col("kind") == "stream")
        .groupBy("node")
        .agg(F.max_by(F.struct("*"), "started_at").alias("last"))
        .select("last.*")
        .orderBy("node")
        .collect()
    )
    states = []
    for row in last:
        seconds = (row["duration_ms"] or 0) / 1000
        # collect() gives timestamps as naive datetimes in this process's local time
        ended = row["started_at"].astimezone(UTC).timestamp() + seconds
        ended_at = datetime.fromtimestamp(ended, UTC)
        states.append(
            StreamState(
                row["node"],
                row["batch_id"],
                ended_at,
                max(0.0, (now - ended_at).total_seconds()),
                row["input_rows"] or 0,
                row["input_rows_per_second"],
                row["processed_rows_per_second"],
                seconds,
                row["state_rows"],
                row["state_memory_bytes"],
            )
        )
    return states


def kafka_lag(
    ends: Mapping[tuple[str, int], tuple[int, int]], read: Mapping[tuple[str, int], int]
) -> list[PartitionLag]:
    """Per partition, records in Kafka that bronze has not read: from where it stands (or
    the earliest offset, where it has read nothing) to the end."""
    lags = []
    for (topic, partition), (earliest, end) in sorted(ends.items()):
        read_to = read.get((topic, partition))
        lag = end - (earliest if read_to is None else read_to)
        lags.append(PartitionLag(topic, partition, end, read_to, max(0, lag)))
    return lags


def readers_behind(
    spark: SparkSession, settings: Settings, readers: Sequence[Reader]
) -> list[ReaderLag]:
    """How far each incremental reader is behind the table it reads."""
    lags = []
    history: dict[str, list[Any]] = {}
    for table, read in sorted(positions.next_versions(spark, settings, readers).items()):
        uri = settings.storage.table_uri(table)
        if table not in history:
            history[table] = (
                spark.sql(f"DESCRIBE HISTORY delta.`{uri}`")
                .select("version", "operation", "operationMetrics")
                .collect()
                if catalog.is_delta(spark, uri)
                else []
            )
        for reader, next_version in read:
            unread = [h for h in history[table] if h["version"] >= next_version]
            lags.append(
                ReaderLag(
                    reader,
                    table,
                    len(unread),
                    sum(changed_rows(h["operation"], h["operationMetrics"] or {}) for h in unread),
                )
            )
    return lags


def changed_rows(operation: str, metrics: Mapping[str, str]) -> int:
    """Rows a Delta commit added, changed or deleted, from its operation metrics; 0 for
    one that changes no data (OPTIMIZE, VACUUM)."""
    if operation == "OPTIMIZE" or operation.startswith("VACUUM"):
        return 0
    if operation == "MERGE":
        keys: Iterable[str] = (
            "numTargetRowsInserted",
            "numTargetRowsUpdated",
            "numTargetRowsDeleted",
        )
    else:
        keys = ("numOutputRows", "numDeletedRows")
    return sum(int(metrics.get(k, 0)) for k in keys)


def freshness(
    spark: SparkSession, settings: Settings, rule: FreshnessRule, now: datetime
) -> Freshness:
    """A table's newest value of the rule's column against the clock; a table not built
    yet is an error."""
    uri = settings.storage.table_uri(rule.table)
    newest = None
    if catalog.is_delta(spark, uri):
        (newest,) = spark.read.format("delta").load(uri).agg(F.max(rule.column)).collect()[0]
    if newest is None:
        return Freshness(rule.table, rule.column, None, None, "error")
    newest = newest.astimezone(UTC)  # naive, in this process's local time
    age = max(0.0, (now - newest).total_seconds())
    return Freshness(rule.table, rule.column, newest, age, level_of(age, rule))


def level_of(age_seconds: float, rule: FreshnessRule) -> Level:
    if age_seconds > rule.error_after_seconds:
        return "error"
    if age_seconds > rule.warn_after_seconds:
        return "warn"
    return "ok"


def lines(found: Status) -> list[str]:
    """The status as a person reads it."""
    out = ["streams:"]
    for s in found.streams:
        arrived, processed = s.input_rows_per_second, s.processed_rows_per_second
        rates = f"{_per_second(arrived)} in, {_per_second(processed)} processed"
        state = ""
        if s.state_rows is not None:
            state = f", state {s.state_rows:,} rows {size(s.state_memory_bytes or 0)}"
        out.append(
            f"  {s.node:<8} batch {s.batch_id} ended {duration(s.seconds_ago)} ago: "
            f"{s.input_rows:,} rows in {s.batch_seconds:.1f}s ({rates}){state}"
        )
    if not found.streams:
        out.append("  no batch recorded yet")
    if found.kafka_error:
        out.append(f"kafka lag: ERROR {found.kafka_error}")
    else:
        total = sum(p.lag for p in found.kafka)
        out.append(f"kafka lag (bronze behind the broker): {total:,} records")
        out += [
            f"  {p.topic}/{p.partition:<4} {p.lag:>10,}  (end {p.end_offset:,}, "
            f"read to {'nothing yet' if p.read_to is None else f'{p.read_to:,}'})"
            for p in found.kafka
        ]
    if found.kafka_changes:
        out.append(f"kafka changes accepted ({kafka_changes.NAME}), the latest first:")
        out += [
            f"  batch {c['bronze_batch']}: {kafka_changes.describe(c)}"
            for c in found.kafka_changes[:10]
        ]
    out.append("readers behind their inputs:")
    out += [
        f"  {r.reader:<24} {r.table:<24} {r.versions_behind:>4} versions, {r.rows_behind:>10,} rows"
        for r in found.readers
    ]
    out.append("freshness (newest data against the clock):")
    for f in found.freshness:
        age = (
            "no data"
            if f.age_seconds is None
            else f"{duration(f.age_seconds)} old ({f.column} {f.newest:%Y-%m-%d %H:%M:%S})"
        )
        out.append(f"  {f.level.upper():<5} {f.table:<24} {age}")
    out.append(f"status: {found.level}")
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _per_second(value: float | None) -> str:
    return "?/s" if value is None else f"{value:,.0f}/s"
