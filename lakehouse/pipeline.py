"""The pipeline in one place: its streams, its models, and who reads what incrementally.

This is the one module that imports the layers. The CLI runs what it lists, compaction
checks VACUUM against the readers it lists, and a test loads it, so that a layer that no
longer fits breaks there first. A new gold model needs no entry here: models are found
by scanning `gold/`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import SparkSession

import gold
from bronze import sensor_records
from lakehouse import compaction
from lakehouse.incremental import Model, declared_models, dependency_order
from lakehouse.settings import Settings
from lakehouse.streaming import RunStats
from silver import reconstruct


@dataclass(frozen=True)
class Stream:
    """A streaming job: what it reads, where its checkpoint is, how to run and sum it up."""

    layer: str
    reads: str
    """The Delta table it reads incrementally, or `kafka`."""
    checkpoint: str
    run: Callable[[SparkSession, Settings, bool, frozenset[str] | None, bool], RunStats]
    """`run(spark, settings, continuous, trace, full_refresh)`."""
    summary: Callable[[SparkSession, Settings, RunStats], list[str]]


STREAMS = {
    "bronze": Stream(
        "bronze",
        "kafka",
        sensor_records.CHECKPOINT,
        lambda spark, settings, continuous, _trace, full_refresh: sensor_records.run(
            spark,
            settings,
            continuous,
            compaction.between_batches(spark, settings, sensor_records.WRITES, READERS),
            full_refresh,
        ),
        sensor_records.summary,
    ),
    "silver": Stream(
        "silver",
        sensor_records.NAME,
        reconstruct.CHECKPOINT,
        lambda spark, settings, continuous, trace, full_refresh: reconstruct.run(
            spark,
            settings,
            continuous,
            trace,
            compaction.between_batches(spark, settings, reconstruct.WRITES, READERS),
            full_refresh,
        ),
        reconstruct.summary,
    ),
}

STREAM_TABLES = frozenset((*sensor_records.WRITES, *reconstruct.WRITES))
"""Every table a stream writes: while it runs, it holds their leases on S3 and compacts them."""

live_sessions = reconstruct.live_state
"""`lakehouse inspect`: one row per session held in the silver stream's state."""

MODELS: tuple[Model, ...] = tuple(dependency_order(declared_models(gold)))
"""Every gold model, each after the models it reads."""


@dataclass(frozen=True)
class Reader:
    """Something that reads `table` incrementally and so must find the versions it has not
    read yet: a stream (by its checkpoint) or a model (by its recorded runs)."""

    name: str
    table: str
    checkpoint: str | None = None
    model: str | None = None


READERS: tuple[Reader, ...] = (
    *(
        Reader(f"the {s.layer} stream", s.reads, checkpoint=s.checkpoint)
        for s in STREAMS.values()
        if s.reads != "kafka"
    ),
    *(Reader(m.name, table, model=m.name) for m in MODELS for table in m.reads),
)
