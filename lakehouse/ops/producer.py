"""Sensor traffic for tests, demos and benchmarks: deterministic, with faults on request.

`generate_traffic` is pure: the same `TrafficSpec` always yields the same records in the
same order. `produce` sends them to Kafka and reports what it sent, so tests can compare a
table with the report. The message format is `docs/protocol.md`.
"""

from __future__ import annotations

import heapq
import json
import random
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from lakehouse.core.console import Live, echo
from lakehouse.core.errors import LakehouseError

FAULTS = (
    "gap",  # a record is never sent: its seq is missing
    "duplicate",  # a record is sent twice, byte for byte
    "reorder",  # a record and its successor swap places
    "malformed_json",  # the value is cut in half: not JSON
    "missing_field",  # a required field is absent
    "wrong_type",  # seq is a string
    "oversize",  # the value is padded beyond MAX_VALUE_BYTES
    "null_key",  # the record has no key (it still goes to its session's partition)
)
MAX_VALUE_BYTES = 256 * 1024
"""The protocol's bound on a value; `oversize` faults exceed it (the broker still takes them)."""


@dataclass(frozen=True)
class TrafficSpec:
    """What to generate. Counts are per sensor and per session."""

    seed: int = 7
    sensors: int = 3
    first_sensor: int = 1
    sessions_per_sensor: int = 4
    rows_per_snapshot: int = 200
    updates_per_session: int = 100
    resync_every: int = 0
    """Send a fresh snapshot after this many updates (0: never)."""
    faults: dict[str, int] = field(default_factory=dict)
    start_time: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    end_sessions: bool = True
    """Close each session with `end`; False leaves them all live (state-size benchmarks)."""
    session_stagger_seconds: float = 37.0
    """A sensor's sessions start this far apart; smaller means more live at once."""
    topic_prefix: str = "sensors."
    partitions: int = 3

    def __post_init__(self) -> None:
        unknown = set(self.faults) - set(FAULTS)
        if unknown:
            raise LakehouseError(f"unknown fault(s) {sorted(unknown)}; known: {', '.join(FAULTS)}")

    def sensor_ids(self) -> list[str]:
        return [
            f"sensor-{i:03d}" for i in range(self.first_sensor, self.first_sensor + self.sensors)
        ]


@dataclass(frozen=True)
class Record:
    """One Kafka record to send; `kind` and `fault` say what it is (a duplicate's second copy
    carries the fault, a reorder's record moved later does)."""

    topic: str
    partition: int
    key: bytes | None
    value: bytes
    kind: str
    fault: str | None = None
    headers: tuple[tuple[str, bytes], ...] = (("producer", b"lakehouse"),)


@dataclass
class ProduceReport:
    """What was sent: records by kind and by topic, and the faults injected.

    A gap is a record not sent, so faults are counted as injected events, not records.
    """

    records: int = 0
    by_kind: Counter[str] = field(default_factory=Counter)
    by_fault: Counter[str] = field(default_factory=Counter)
    by_topic: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    def add(self, record: Record) -> None:
        self.records += 1
        self.by_kind[record.kind] += 1
        self.by_topic[record.topic] += 1

    def to_json(self) -> str:
        return json.dumps(
            {
                "records": self.records,
                "by_kind": dict(self.by_kind),
                "by_fault": dict(self.by_fault),
                "by_topic": dict(self.by_topic),
                "seconds": round(self.seconds, 3),
            },
            sort_keys=True,
        )

    def to_text(self) -> str:
        rate = self.records / self.seconds if self.seconds else 0.0
        lines = [f"sent {self.records:,} records to {len(self.by_topic)} topics ({rate:,.0f}/s)"]
        lines.append("  by kind:  " + _counts(self.by_kind))
        lines.append("  by fault: " + (_counts(self.by_fault) or "none"))
        lines.extend(f"  {topic}: {n:,}" for topic, n in sorted(self.by_topic.items()))
        return "\n".join(lines)


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{k}={v:,}" for k, v in sorted(counter.items()))


def partition_of(session_id: str, partitions: int) -> int:
    """The session's partition: fixed by its id, so even a keyless record keeps its place."""
    return zlib.crc32(session_id.encode()) % partitions


def generate_traffic(spec: TrafficSpec) -> Iterator[Record]:
    """All records of all sessions, interleaved by event time as sensors would send them."""
    rng = random.Random(spec.seed)
    sessions = [
        _session_messages(rng, spec, sensor, index)
        for sensor in spec.sensor_ids()
        for index in range(spec.sessions_per_sensor)
    ]
    faults = _plan_faults(rng, spec, [len(s) for s in sessions])
    streams = [
        _apply_faults(spec, messages, faults.get(i, {})) for i, messages in enumerate(sessions)
    ]
    yield from (record for _, _, record in heapq.merge(*streams))


def _session_messages(
    rng: random.Random, spec: TrafficSpec, sensor: str, index: int
) -> list[dict[str, Any]]:
    session_id = f"{sensor}-{index:04d}-{rng.getrandbits(32):08x}"
    clock = spec.start_time + timedelta(
        seconds=index * spec.session_stagger_seconds + rng.uniform(0, 30)
    )
    table = {f"r{n:04d}": _row_values(rng) for n in range(spec.rows_per_snapshot)}
    next_row = spec.rows_per_snapshot

    def message(kind: str, **payload: Any) -> dict[str, Any]:
        return {
            "session_id": session_id,
            "sensor_id": sensor,
            "seq": 0,
            "kind": kind,
            "event_time": clock.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            **payload,
        }

    messages = [message("snapshot", rows=_rows(table))]
    row_ids = list(table)  # beside the dict, so that a random pick is O(1)
    for n in range(1, spec.updates_per_session + 1):
        clock += timedelta(seconds=rng.uniform(0.5, 1.5))
        if spec.resync_every and n % spec.resync_every == 0:
            messages.append(message("snapshot", rows=_rows(table)))
            continue
        draw = rng.random()
        if draw < 0.05 and len(row_ids) > 1:
            row_id = row_ids.pop(rng.randrange(len(row_ids)))
            del table[row_id]
            messages.append(message("update", op="delete", row_id=row_id))
            continue
        if draw < 0.15:
            row_id, next_row = f"r{next_row:04d}", next_row + 1
            row_ids.append(row_id)
        else:
            row_id = rng.choice(row_ids)
        table[row_id] = _row_values(rng)
        messages.append(
            message("update", op="upsert", row={"row_id": row_id, "values": table[row_id]})
        )
    if spec.end_sessions:
        clock += timedelta(seconds=1)
        messages.append(message("end"))
    for seq, m in enumerate(messages):
        m["seq"] = seq
    return messages


def _row_values(rng: random.Random) -> dict[str, Any]:
    return {
        "temperature": round(rng.gauss(21.0, 3.0), 2),
        "humidity": round(rng.uniform(20.0, 80.0), 1),
        "pressure": round(rng.gauss(1013.0, 8.0), 1),
        "status": rng.choices(("ok", "warn", "fault"), weights=(90, 8, 2))[0],
        "counter": rng.randrange(1_000_000),
    }


def _rows(table: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"row_id": row_id, "values": values} for row_id, values in table.items()]


def _plan_faults(
    rng: random.Random, spec: TrafficSpec, session_lengths: list[int]
) -> dict[int, dict[int, str]]:
    """session index -> {message index -> fault}: at most one fault per session.

    One fault per session, on an update (never the opening snapshot or the end), keeps
    every injected fault one distinct, countable event: in strict mode a second fault in
    a session already broken by the first would only be quarantined.
    """
    wanted = sum(spec.faults.values())
    if wanted > len(session_lengths):
        raise LakehouseError(
            f"{wanted} faults requested but only {len(session_lengths)} sessions; "
            "each fault needs a session of its own"
        )
    sessions = rng.sample(range(len(session_lengths)), wanted)
    plan: dict[int, dict[int, str]] = {}
    for fault in FAULTS:
        for _ in range(spec.faults.get(fault, 0)):
            session = sessions.pop()
            # n - 2 is the last update; a reorder swaps it with its successor, so stop one short.
            plan[session] = {rng.randrange(1, session_lengths[session] - 2): fault}
    return plan


def _apply_faults(
    spec: TrafficSpec, messages: list[dict[str, Any]], faults: dict[int, str]
) -> Iterator[tuple[datetime, int, Record]]:
    """The session's records in send order, each keyed for the merge by (time, tiebreak)."""
    session_id, sensor = messages[0]["session_id"], messages[0]["sensor_id"]
    topic = f"{spec.topic_prefix}{sensor}"
    partition = partition_of(session_id, spec.partitions)
    order = list(range(len(messages)))
    for index, kind in faults.items():
        if kind == "reorder":
            order[index], order[index + 1] = order[index + 1], order[index]
    tiebreak = zlib.crc32(session_id.encode())
    for position, index in enumerate(order):
        message = messages[index]
        fault = faults.get(index)
        key: bytes | None = session_id.encode()
        value = json.dumps(message, separators=(",", ":")).encode()
        when = datetime.fromisoformat(messages[position]["event_time"])
        if fault == "gap":
            continue
        if fault == "duplicate":
            yield when, tiebreak, Record(topic, partition, key, value, message["kind"])
        elif fault == "malformed_json":
            value = value[: len(value) // 2]
        elif fault == "missing_field":
            value = json.dumps({k: v for k, v in message.items() if k != "seq"}).encode()
        elif fault == "wrong_type":
            value = json.dumps({**message, "seq": str(message["seq"])}).encode()
        elif fault == "oversize":
            value = json.dumps({**message, "padding": "x" * MAX_VALUE_BYTES}).encode()
        elif fault == "null_key":
            key = None
        yield when, tiebreak, Record(topic, partition, key, value, message["kind"], fault)


def create_topics(
    bootstrap: str, topics: list[str], partitions: int, options: dict[str, str]
) -> None:
    """Create missing topics; existing ones are left as they are."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    # Errors only: librdkafka prints its informational lines (a purged queue at close) to
    # stderr, in the middle of the project's console.
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3, **options})
    futures = admin.create_topics(
        [NewTopic(t, num_partitions=partitions, replication_factor=1) for t in topics],
        request_timeout=15,
    )
    for topic, future in futures.items():
        try:
            future.result()
        except KafkaException as error:
            if error.args[0].name() != "TOPIC_ALREADY_EXISTS":
                raise LakehouseError(
                    f"cannot create topic {topic} on {bootstrap}: {error}"
                ) from None


def _send(producer: Any, record: Any, delivered: Callable[[Any, Any], None]) -> None:
    """Queue `record`, waiting for room in the producer's buffer when it is full."""
    while True:
        try:
            producer.produce(
                record.topic,
                record.value,
                record.key,
                record.partition,
                on_delivery=delivered,
                headers=list(record.headers),
            )
            break
        except BufferError:
            producer.poll(0.05)
    producer.poll(0)


def produce(
    spec: TrafficSpec,
    bootstrap: str,
    options: dict[str, str] | None = None,
    rate: float | None = None,
    progress: bool = False,
) -> ProduceReport:
    """Send the spec's traffic, at `rate` records/s or as fast as possible (None)."""
    from confluent_kafka import Producer

    options = options or {}
    create_topics(
        bootstrap, [f"{spec.topic_prefix}{s}" for s in spec.sensor_ids()], spec.partitions, options
    )
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            # Idempotence keeps the broker from duplicating or reordering on retries, so the
            # only faults in a topic are the ones injected on purpose.
            "enable.idempotence": True,
            "linger.ms": 20,
            "compression.type": "lz4",
            "message.max.bytes": 2 * MAX_VALUE_BYTES,
            "log_level": 3,
            **options,
        }
    )
    errors: list[str] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            errors.append(str(error))

    report = ProduceReport(by_fault=Counter({f: n for f, n in spec.faults.items() if n}))
    started = time.monotonic()  # the rate's clock
    with Live("producing") as live:
        for record in generate_traffic(spec):
            if rate:
                ahead = report.records / rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
            _send(producer, record, delivered)
            report.add(record)
            if progress:
                live.show(f"{report.records:,} records sent")
                # Off a terminal (a log, a pipe), a line now and then instead.
                if not live.on and report.records % 100_000 == 0:
                    echo(f"  … {report.records:,} records sent")
            if errors:
                break
    remaining = producer.flush(60)
    report.seconds = time.monotonic() - started
    if errors or remaining:
        first = errors[0] if errors else f"{remaining} records undelivered after 60s"
        raise LakehouseError(f"producing to {bootstrap} failed: {first}")
    return report
