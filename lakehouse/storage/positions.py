"""Where each reader stands: how far a stream's checkpoint or a gold model's last run has
read its input, and how far behind that input's end it is.

One home for what compaction (VACUUM must not delete what a reader has not read),
`lakehouse status` (lag) and silver (was bronze rebuilt under it?) all ask. A stream's
position is the offsets of its last committed batch in its checkpoint: a Delta source's
version, or the Kafka offsets per partition of bronze. A model's is the input versions its
last run recorded in `gold.model_runs`. Both are read from storage, so they answer while
the reader is stopped.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import SparkSession

from lakehouse.core.settings import Settings
from lakehouse.storage import catalog, model_runs


@dataclass(frozen=True)
class Reader:
    """Something that reads `table` incrementally and so must find the versions it has not
    read yet: a stream (by its checkpoint) or a model (by its recorded runs)."""

    name: str
    table: str
    checkpoint: str | None = None
    model: str | None = None


@dataclass(frozen=True)
class Lag:
    """How far one reader of a table is behind it."""

    reader: str
    next_version: int
    """The first version it has not read."""
    seconds: float
    """Age of that version's commit; 0 when the reader is up to date."""


def next_versions(
    spark: SparkSession, settings: Settings, readers: Sequence[Reader]
) -> dict[str, list[tuple[str, int]]]:
    """table -> (reader, the first version of it the reader has not read), for each of
    `readers` that has read anything yet."""
    positions: dict[str, list[tuple[str, int]]] = defaultdict(list)
    models_read: model_runs.LastVersions = {}
    # The run log is a Spark job to read: only for models' positions.
    if any(r.model is not None for r in readers) and catalog.is_delta(
        spark, settings.storage.table_uri(model_runs.RUNS.name)
    ):
        models_read = model_runs.last_versions(spark, settings.storage)
    for reader in readers:
        position = None
        if reader.checkpoint is not None:
            checkpoint = settings.storage.checkpoint_uri(reader.checkpoint)
            position = stream_next_version(spark, checkpoint)
        elif reader.model is not None:
            last = models_read.get(reader.model, {})
            position = last[reader.table][0] + 1 if reader.table in last else None
        if position is not None:
            positions[reader.table].append((reader.name, position))
    return positions


def reader_lags(
    spark: SparkSession, settings: Settings, readers: Sequence[Reader], tables: dict[str, str]
) -> dict[str, list[Lag]]:
    """table -> the lag of each of `readers` that reads it, for the `tables` (name ->
    location) given."""
    now = datetime.now(UTC)
    return {
        table: [
            Lag(reader, version, _age(spark, tables[table], version, now))
            for reader, version in read
        ]
        for table, read in next_versions(spark, settings, readers).items()
        if table in tables
    }


def stream_next_version(spark: SparkSession, checkpoint: str) -> int | None:
    """The first version of its Delta source a stream has not fully processed, from the
    offsets of its last committed batch; None before its first batch commits."""
    offset = _source_offset(spark, checkpoint)
    if offset is None:
        return None
    version = int(offset["reservoirVersion"])
    return version + 1 if offset.get("index", -1) > 1 << 60 else version


def checkpoint_id(spark: SparkSession, checkpoint: str) -> str | None:
    """The id of a stream's checkpoint (its query's, kept for its life); None before the
    stream first started on it."""
    fs, path = catalog.hadoop_fs(spark, checkpoint)
    metadata = path.suffix("/metadata")
    if not fs.exists(metadata):
        return None
    return str(json.loads(_read(spark, fs, metadata))["id"])


def stream_source_id(spark: SparkSession, checkpoint: str) -> str | None:
    """The table id of the Delta source a stream's last committed batch read."""
    offset = _source_offset(spark, checkpoint)
    return None if offset is None else str(offset["reservoirId"])


def kafka_offsets(spark: SparkSession, checkpoint: str) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the next offset a Kafka stream will read, as of its last
    committed batch; empty before its first batch commits."""
    return _kafka_position(_source_offset(spark, checkpoint) or {})


@dataclass(frozen=True)
class KafkaCheckpoint:
    """Where a Kafka stream stands in its checkpoint: its last committed batch and that
    batch's end offsets, and the batch planned after it, if one is (a batch that failed or
    was cut short: a restart runs it again as planned)."""

    query_id: str
    """The id of the checkpoint's query: the app id of its batches' Delta transactions."""
    committed: int
    position: dict[tuple[str, int], int]
    """(topic, partition) -> the next offset the stream reads."""
    planned: dict[tuple[str, int], int] | None
    """The end offsets of the batch planned after the committed one, if any."""


def kafka_checkpoint(spark: SparkSession, checkpoint: str) -> KafkaCheckpoint | None:
    """A Kafka stream's position in its checkpoint; None before its first batch commits."""
    fs, path = catalog.hadoop_fs(spark, checkpoint)
    commits = _batch_ids(fs, path.suffix("/commits"))
    if not commits:
        return None
    committed = max(commits)
    planned = [b for b in _batch_ids(fs, path.suffix("/offsets")) if b > committed]
    metadata = json.loads(_read(spark, fs, path.suffix("/metadata")))
    return KafkaCheckpoint(
        str(metadata["id"]),
        committed,
        _kafka_position(_offset_of(spark, fs, path, committed)),
        _kafka_position(_offset_of(spark, fs, path, min(planned))) if planned else None,
    )


def kafka_batch_end(spark: SparkSession, checkpoint: str, batch: int) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the offset a Kafka stream's batch reads up to, as planned."""
    fs, path = catalog.hadoop_fs(spark, checkpoint)
    return _kafka_position(_offset_of(spark, fs, path, batch))


def commit_kafka_position(
    spark: SparkSession, checkpoint: str, position: dict[tuple[str, int], int]
) -> int:
    """Commit, in a Kafka stream's checkpoint, a batch that reads nothing and ends at
    `position`, in place of any batch planned after the last committed one: the stream
    goes on from there. Returns the batch's id.

    A batch from the last committed position to `position` is what Spark would have run
    had it skipped the offsets in between; copying the last batch's metadata and commit
    keeps the files in the format the checkpoint was begun in."""
    fs, path = catalog.hadoop_fs(spark, checkpoint)
    committed = max(_batch_ids(fs, path.suffix("/commits")))
    lines = _read(spark, fs, path.suffix(f"/offsets/{committed}")).splitlines()
    nested: dict[str, dict[str, int]] = defaultdict(dict)
    for (topic, partition), offset in sorted(position.items()):
        nested[topic][str(partition)] = offset
    batch = committed + 1
    _write(fs, path.suffix(f"/offsets/{batch}"), "\n".join([*lines[:2], json.dumps(nested)]))
    commit = _read(spark, fs, path.suffix(f"/commits/{committed}"))
    _write(fs, path.suffix(f"/commits/{batch}"), commit)
    return batch


def _kafka_position(offset: dict[str, Any]) -> dict[tuple[str, int], int]:
    return {
        (topic, int(partition)): int(next_offset)
        for topic, partitions in offset.items()
        for partition, next_offset in partitions.items()
    }


def _source_offset(spark: SparkSession, checkpoint: str) -> dict[str, Any] | None:
    """The offset of the (one) source of a stream's last committed batch."""
    fs, path = catalog.hadoop_fs(spark, checkpoint)
    commits = _batch_ids(fs, path.suffix("/commits"))
    return _offset_of(spark, fs, path, max(commits)) if commits else None


def _offset_of(spark: SparkSession, fs: Any, checkpoint: Any, batch: int) -> dict[str, Any]:
    offsets = _read(spark, fs, checkpoint.suffix(f"/offsets/{batch}")).splitlines()
    # "v1", the batch's metadata, then one offset per source: each stream here has one.
    found: dict[str, Any] = json.loads(offsets[2])
    return found


def _age(spark: SparkSession, location: str, version: int, now: datetime) -> float:
    from delta.tables import DeltaTable

    history = DeltaTable.forPath(spark, location).history()
    committed = history.where(history.version == version).select("timestamp").first()
    if committed is None:  # not committed yet: the reader is up to date
        return 0.0
    # collect() gives Spark's timestamps as naive datetimes in this process's local time.
    return max(0.0, (now - committed["timestamp"].astimezone(UTC)).total_seconds())


def _batch_ids(fs: Any, folder: Any) -> list[int]:
    if not fs.exists(folder):
        return []
    names = [s.getPath().getName() for s in fs.listStatus(folder)]
    return [int(n) for n in names if n.isdigit()]


def _write(fs: Any, path: Any, text: str) -> None:
    stream = fs.create(path, True)
    try:
        stream.write(bytearray(text.encode()))  # py4j hands a bytearray over as byte[]
    finally:
        stream.close()


def _read(spark: SparkSession, fs: Any, path: Any) -> str:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    stream = fs.open(path)
    try:
        return str(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
    finally:
        stream.close()


def read_note(spark: SparkSession, uri: str) -> str | None:
    """The text of a small file a job keeps beside its checkpoint, or None if there is none."""
    fs, path = catalog.hadoop_fs(spark, uri)
    return _read(spark, fs, path) if fs.exists(path) else None


def write_note(spark: SparkSession, uri: str, text: str) -> None:
    fs, path = catalog.hadoop_fs(spark, uri)
    _write(fs, path, text)


def batch_begun(spark: SparkSession, checkpoint: str) -> bool:
    """Whether a stream planned a batch it has not committed: it may be writing it now."""
    fs, folder = catalog.hadoop_fs(spark, checkpoint)
    planned = _batch_ids(fs, folder.suffix("/offsets"))
    committed = _batch_ids(fs, folder.suffix("/commits"))
    return max(planned, default=-1) > max(committed, default=-1)
