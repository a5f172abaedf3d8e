"""`lakehouse status`: is the pipeline keeping up, and is its data fresh?

Everything is read from storage and the broker, never from a running job, so it answers
the same whether the streams run or not:
- each stream's last batch, from its progress table (`ops.progress`);
- Kafka lag per partition: the broker's end offsets minus the offsets of bronze's last
  committed batch in its checkpoint (Spark commits no consumer-group offsets, so Kafka's
  own tools see none), and how long the oldest record bronze has not read has waited;
  per topic, by the rule `status.kafka_lag`;
- a stream stalled: no batch for longer than `status.stalled` allows while its input waits;
- how far each incremental reader is behind what it reads: the silver stream behind
  bronze, each gold model behind its inputs, in versions and in rows;
- freshness: each table's newest Kafka timestamp or event time against the wall clock,
  by the rules of `status.freshness`;
- names: each of the catalog's names of silver and gold that does not point where the
  lake's versions say (`lakehouse shadow swap` not finished), an error.
The worst level found is the exit code: 0 all well, 1 a warning, 2 an error.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bronze import kafka_changes
from lakehouse.core.console import duration, size
from lakehouse.core.settings import FreshnessRule, KafkaLagRule, Settings, StallRule
from lakehouse.definitions import READERS, STREAMS
from lakehouse.observe import progress
from lakehouse.ops import shadow
from lakehouse.services.kafka import record_times, watermarks
from lakehouse.storage import catalog, delta, positions
from lakehouse.storage import versions as stored
from lakehouse.storage.positions import Reader

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
    oldest_unread: datetime | None = None
    """The Kafka timestamp of the first record bronze has not read, where it lags."""

    @property
    def next_offset(self) -> int:
        """The offset of the first record bronze has not read."""
        return self.end_offset - self.lag


@dataclass(frozen=True)
class TopicLag:
    """Bronze behind the broker on one topic, its partitions summed."""

    topic: str
    partitions: int
    lag: int
    seconds_behind: float
    """How long the oldest record bronze has not read has waited (0 when none waits)."""
    lagging: list[PartitionLag]
    level: Level


@dataclass(frozen=True)
class Stall:
    """A stream with input waiting and no batch for longer than `status.stalled` allows."""

    stream: str
    waiting: str
    """What waits for it: Kafka records, or rows of versions of its input table."""
    seconds_since_batch: float | None
    """None: it never recorded a batch."""
    level: Level


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
class PipelineStatus:
    streams: list[StreamState] = field(default_factory=list)
    kafka: list[PartitionLag] = field(default_factory=list)
    topics: list[TopicLag] = field(default_factory=list)
    stalls: list[Stall] = field(default_factory=list)
    kafka_error: str | None = None
    readers: list[ReaderLag] = field(default_factory=list)
    freshness: list[Freshness] = field(default_factory=list)
    kafka_changes: list[dict[str, Any]] = field(default_factory=list)
    """Changes in Kafka an operator accepted (bronze.kafka_changes), the latest first."""
    misnamed: list[shadow.Misnamed] = field(default_factory=list)
    misnamed_until: str = ""
    """The command that points the names as the lake's versions say."""

    @property
    def level(self) -> Level:
        found = [f.level for f in self.freshness] + (["error"] if self.kafka_error else [])
        found += [t.level for t in self.topics] + [s.level for s in self.stalls]
        found += ["error"] if self.misnamed else []
        return max(found, key=LEVELS.index, default="ok")

    @property
    def exit_code(self) -> int:
        return LEVELS.index(self.level)

    def as_json(self) -> dict[str, Any]:
        return {**_jsonable(asdict(self)), "level": self.level}


def status(
    spark: SparkSession,
    settings: Settings,
    now: datetime | None = None,
) -> PipelineStatus:
    """The pipeline's status as of `now`."""
    streams, readers = STREAMS.values(), READERS
    now = now or datetime.now(UTC)
    rules = settings.status
    found = PipelineStatus(streams=stream_states(spark, settings, now))
    waiting: dict[str, str] = {}
    found.readers = readers_behind(spark, settings, readers)
    for stream in streams:
        if stream.reads != "kafka":
            of_stream = {r.name for r in readers if r.checkpoint == stream.checkpoint}
            behind = [r for r in found.readers if r.reader in of_stream and r.rows_behind]
            if behind:
                waiting[stream.layer] = f"{sum(r.rows_behind for r in behind):,} rows of " + (
                    ", ".join(sorted({r.table for r in behind}))
                )
            continue
        read = positions.kafka_offsets(spark, settings.storage.checkpoint_uri(stream.checkpoint))
        try:
            lags = kafka_lag(watermarks(settings), read)
            first_unread = {(p.topic, p.partition): p.next_offset for p in lags if p.lag}
            lags = with_times(lags, record_times(settings, first_unread))
        except Exception as error:  # a broker down is part of the answer, not a crash
            found.kafka_error = str(error).splitlines()[0]
            continue
        found.kafka = lags
        found.topics = topic_lags(lags, rules.kafka_lag, now)
        if any(p.lag for p in lags):
            waiting[stream.layer] = f"{sum(p.lag for p in lags):,} Kafka records"
    found.stalls = stalls(found.streams, waiting, rules.stalled)
    found.kafka_changes = kafka_changes.history(spark, settings)
    found.freshness = [freshness(spark, settings, rule, now) for rule in rules.freshness]
    versions = stored.read(settings)
    found.misnamed = shadow.names_against(spark, settings, versions)
    found.misnamed_until = shadow.finishing(versions)
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


def with_times(
    lags: Sequence[PartitionLag], times: Mapping[tuple[str, int], datetime]
) -> list[PartitionLag]:
    return [replace(p, oldest_unread=times.get((p.topic, p.partition))) for p in lags]


def topic_lags(
    partitions: Sequence[PartitionLag], rule: KafkaLagRule, now: datetime
) -> list[TopicLag]:
    """Per topic: the records bronze has not read, how long the oldest of them waited, and
    its level by `rule` (the worse of the two)."""
    topics: dict[str, list[PartitionLag]] = {}
    for p in partitions:
        topics.setdefault(p.topic, []).append(p)
    found = []
    for topic, parts in sorted(topics.items()):
        lagging = [p for p in parts if p.lag]
        waited = [(now - p.oldest_unread).total_seconds() for p in lagging if p.oldest_unread]
        records, seconds = sum(p.lag for p in parts), max([0.0, *waited])
        level = max(
            (
                _level(records, rule.warn_records, rule.error_records),
                _level(seconds, rule.warn_seconds, rule.error_seconds),
            ),
            key=LEVELS.index,
        )
        found.append(TopicLag(topic, len(parts), records, seconds, lagging, level))
    return found


def stalls(
    streams: Sequence[StreamState], waiting: Mapping[str, str], rule: StallRule
) -> list[Stall]:
    """The streams whose input waits (`waiting`: stream -> what waits) and whose last batch
    is older than `rule` allows; one that never ran a batch warns (how long its input has
    waited is not known)."""
    last = {s.node: s.seconds_ago for s in streams}
    found = []
    for stream, what in sorted(waiting.items()):
        since = last.get(stream)
        level = (
            "warn"
            if since is None
            else _level(since, rule.warn_after_seconds, rule.error_after_seconds)
        )
        if level != "ok":
            found.append(Stall(stream, what, since, level))
    return found


def _level(value: float, warn: float, error: float) -> Level:
    """Past `error` an error, past `warn` a warning."""
    if value > error:
        return "error"
    if value > warn:
        return "warn"
    return "ok"


def readers_behind(
    spark: SparkSession, settings: Settings, readers: Sequence[Reader]
) -> list[ReaderLag]:
    """How far each incremental reader is behind the table it reads."""
    lags = []
    for table, read in sorted(positions.next_versions(spark, settings, readers).items()):
        uri, first = settings.storage.table_uri(table), min(v for _, v in read)
        history = delta.history_since(spark, uri, first)
        for reader, next_version in read:
            unread = [h for h in history if h["version"] >= next_version]
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
    return _level(age_seconds, rule.warn_after_seconds, rule.error_after_seconds)


def lines(found: PipelineStatus, partitions: bool = False) -> list[str]:
    """The status as a person reads it: Kafka lag by topic with the partitions that lag,
    or every partition with `partitions`."""
    out = [*_stream_lines(found), *_kafka_lines(found, partitions)]
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
    out += shadow.misnamed_lines(found.misnamed, found.misnamed_until)
    out.append(f"status: {found.level}")
    return out


def _stream_lines(found: PipelineStatus) -> list[str]:
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
    for stall in found.stalls:
        since = (
            "never ran a batch"
            if stall.seconds_since_batch is None
            else f"no batch for {duration(stall.seconds_since_batch)}"
        )
        out.append(
            f"  {stall.level.upper():<5} {stall.stream} stalled: {since}, {stall.waiting} wait"
        )
    return out


def _kafka_lines(found: PipelineStatus, partitions: bool) -> list[str]:
    out = []
    if found.kafka_error:
        out.append(f"kafka lag: ERROR {found.kafka_error}")
    else:
        total = sum(t.lag for t in found.topics)
        out.append(f"kafka lag (bronze behind the broker): {total:,} records")
        for t in found.topics:
            waited = f", the oldest waiting {duration(t.seconds_behind)}" if t.lag else ""
            shown = t.lagging if not partitions else [p for p in found.kafka if p.topic == t.topic]
            out.append(
                f"  {t.level.upper():<5} {t.topic:<28} {t.lag:>10,} records{waited} "
                f"({len(t.lagging)} of {t.partitions} partitions behind)"
            )
            out += [
                f"          {p.partition:<4} {p.lag:>10,}  (end {p.end_offset:,}, "
                f"read to {'nothing yet' if p.read_to is None else f'{p.read_to:,}'})"
                for p in shown
            ]
    if found.kafka_changes:
        out.append(f"kafka changes accepted ({kafka_changes.NAME}), the latest first:")
        out += [
            f"  batch {c['bronze_batch']}: {kafka_changes.describe(c)}"
            for c in found.kafka_changes[:10]
        ]
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
