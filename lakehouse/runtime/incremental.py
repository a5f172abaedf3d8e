"""Running a gold model: incrementally, as dbt's incremental models do, with Delta's
versions as the bookmark.

- a full refresh builds the whole table from its inputs as of pinned versions;
- an incremental run reads each input's change data feed since the versions the last
  run recorded, recomputes exactly the keys those changes touch from the inputs as of
  the new versions, and MERGEs them. Recomputing whole keys, never adding deltas, is what
  makes the result equal a full refresh (late records included) and a rerun after a
  crash harmless.

Every run that recomputed anything appends a row to `gold.model_runs` with the versions it
processed; one that found no input changed costs a lookup of each input's latest version.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from lakehouse.core.console import echo
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import StorageSettings
from lakehouse.graph.models import Model, dependency_order
from lakehouse.quality.gates import Verdict, WriteGate, input_views
from lakehouse.quality.store import new_run_id
from lakehouse.storage import catalog, delta
from lakehouse.storage.model_runs import RUNS, LastVersions, appended, last_versions


@dataclass(frozen=True)
class Source:
    """An input table as a run sees it: one pinned version of one table."""

    name: str
    location: str
    version: int
    table_id: str
    size_bytes: int


@dataclass
class ModelRun:
    model: str
    mode: str
    """`full`, `incremental`, or `unchanged` (no input changed since the last run)."""
    reason: str = ""
    changed_keys: int | None = None
    rows_written: int = 0
    quarantined: int = 0
    """Rows its gate kept out of the table (`gold.quarantine`)."""
    seconds: float = 0.0
    sources: dict[str, Source] = field(default_factory=dict)
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    """When the model's run began."""


def run_models(
    spark: SparkSession,
    storage: StorageSettings,
    models: Sequence[Model],
    full_refresh: bool = False,
    full_below_bytes: int = 0,
    echo: Callable[[str], None] = echo,
    gate: WriteGate | None = None,
    history: Mapping[str, Mapping[str, tuple[int, str]]] | None = None,
    record: bool = True,
) -> list[ModelRun]:
    """Run `models`, each incrementally unless it cannot be or its inputs are smaller than
    `full_below_bytes`, where a full refresh is cheaper (`gold.full_refresh_below_mb`).

    `models` run one after another, each after the models it reads. The run log gets one
    row per model that recomputed anything, appended once at the end (also when a model
    failed), after the gate's results: a model whose row is lost to a crash is only
    recomputed next time. `gate` validates each model's rows before they are written
    (`WriteGate`). For a caller that runs models one at a time (a walk of the graph):
    `history`, the run log as `run_log` read it, so that it reads the log once rather than
    once per model; `record=False`, so that it records all of them once, with `record_runs`.
    """
    history = run_log(spark, storage) if history is None else history
    # One id for the run, its gate's results and its commits: every commit names the run
    # that made it (Delta's commit metadata), so that `explain` reads which run wrote a row.
    run_id = gate.run_id if gate is not None else new_run_id()

    def run(model: Model) -> ModelRun:
        echo(f"{model.name}: reading {', '.join(model.reads)} ...")
        done = run_model(
            spark, storage, model, history.get(model.name), full_refresh, full_below_bytes, gate
        )
        detail = f", {done.changed_keys:,} keys changed" if done.changed_keys is not None else ""
        detail += f", {done.quarantined:,} rows quarantined" if done.quarantined else ""
        echo(
            f"{model.name}: {done.mode}{' (' + done.reason + ')' if done.reason else ''}"
            f"{detail}, {done.rows_written:,} rows written ({done.seconds:.1f}s)"
        )
        return done

    runs: list[ModelRun] = []
    with delta.commits_naming(spark, run_id):
        try:
            for model in dependency_order(models):
                runs.append(run(model))
        finally:
            if record:
                record_runs(spark, storage, run_id, runs, gate)
    return runs


def run_log(spark: SparkSession, storage: StorageSettings) -> LastVersions:
    """Per model, what its last run processed: the run log, created if it is not yet."""
    delta.create(spark, RUNS, storage.table_uri(RUNS.name))
    return last_versions(spark, storage)


def run_model(
    spark: SparkSession,
    storage: StorageSettings,
    model: Model,
    last: Mapping[str, tuple[int, str]] | None,
    full_refresh: bool = False,
    full_below_bytes: int = 0,
    gate: WriteGate | None = None,
) -> ModelRun:
    """Bring `model`'s table up to its inputs' current versions; `last` is what its last
    run processed (None: it never ran). `gate` judges the rows before they are written:
    a `fail` leaves the table as it was."""
    started, started_at = time.monotonic(), datetime.now(UTC)
    target = storage.table_uri(model.name)
    sources = {name: pin(spark, name, storage.table_uri(name)) for name in model.reads}
    if (
        not full_refresh
        and last is not None
        and all(last.get(name) == (s.version, s.table_id) for name, s in sources.items())
    ):
        # Nothing read since: no input to open, no table to check (a scheduled run of an
        # idle pipeline costs its version lookups only).
        seconds = time.monotonic() - started
        return ModelRun(model.name, "unchanged", sources=sources, started_at=started_at,
                        seconds=seconds)  # fmt: skip
    inputs = [
        spark.read.format("delta").option("versionAsOf", s.version).load(s.location)
        for s in sources.values()
    ]
    delta.create(spark, model.table, target)
    reason = _full_reason(spark, last, sources, full_refresh, full_below_bytes)
    run = ModelRun(model.name, "full", reason, sources=sources, started_at=started_at)
    verdict: Verdict | None = None
    if not run.reason:
        assert last is not None
        verdict = _run_incremental(spark, model, run, last, inputs, target, gate)
    if run.mode == "full":
        verdict = _run_full(spark, model, run, inputs, target, gate)
    if gate and verdict:
        gate.record(spark, model.name, verdict)
        run.quarantined = sum(o.quarantined or 0 for o in verdict.outcomes)
    run.seconds = time.monotonic() - started
    return run


def _full_reason(
    spark: SparkSession,
    last: Mapping[str, tuple[int, str]] | None,
    sources: Mapping[str, Source],
    full_refresh: bool,
    full_below_bytes: int,
) -> str:
    """Why this run rebuilds the whole table, or "" where it can run incrementally."""
    if full_refresh:
        return "--full-refresh"
    if reason := _why_full(last, sources):
        return reason
    size = sum(s.size_bytes for s in sources.values())
    if size < full_below_bytes:  # asked first: it needs no look at the inputs' history
        return (
            f"inputs of {size / 2**20:,.1f} MiB, under gold.full_refresh_below_mb: "
            "a full refresh is cheaper"
        )
    assert last is not None
    for name, s in sources.items():
        if s.version > last[name][0] and delta.replaced_after(spark, s.location, last[name][0]):
            return f"{name} was rebuilt since the last run"
    return ""


def _run_incremental(
    spark: SparkSession,
    model: Model,
    run: ModelRun,
    last: Mapping[str, tuple[int, str]],
    inputs: Sequence[DataFrame],
    target: str,
    gate: WriteGate | None,
) -> Verdict | None:
    """Recompute the keys that the inputs' changes since `last` touch, and MERGE them. The
    run stays `full`, with its reason, where those changes are no longer readable."""
    changes = [
        changes_between(spark, s.location, last[name][0] + 1, s.version)
        if s.version > last[name][0]
        else frame.limit(0)
        for (name, s), frame in zip(run.sources.items(), inputs, strict=True)
    ]
    keys = model.changed_keys(*changes).select(*model.key).distinct().persist()
    try:
        try:
            run.changed_keys = keys.count()
        except Exception as error:  # Delta says "change data gone" in several ways
            if not _lost_changes(error):
                raise
            run.reason = "the change data since the last run is no longer readable"
            return None
        run.mode = "incremental"
        # A new version that changes no rows (compaction's OPTIMIZE) touches no key.
        if not run.changed_keys:
            return None
        narrowed = model.narrow(keys, *inputs)
        rows = model.build(*narrowed)
        rows = conform(rows, model, spark.read.format("delta").load(target)).persist()
        try:
            # The rows are those keys' only: so are the inputs they reconcile with.
            views = _views(model, run.sources, narrowed)
            verdict = gate.judge(rows, model.name, views) if gate else None
            kept = verdict.kept if verdict else rows
            run.rows_written = _merge(rows, target, model.key, kept)
            if gate:
                gate.forget(spark, model.name, keys)
        finally:
            rows.unpersist()
        return verdict
    finally:
        keys.unpersist()


def _run_full(
    spark: SparkSession,
    model: Model,
    run: ModelRun,
    inputs: Sequence[DataFrame],
    target: str,
    gate: WriteGate | None,
) -> Verdict | None:
    """Rebuild the whole table from the inputs (an overwrite)."""
    rows = conform(model.build(*inputs), model, spark.read.format("delta").load(target))
    if gate:  # judged before the overwrite: the rows are cached once for both
        rows = rows.persist()
    verdict: Verdict | None = None
    try:
        if gate:
            verdict = gate.judge(rows, model.name, _views(model, run.sources, inputs))
        written = Observation()  # counted as they are written, not read again after
        kept = verdict.kept if verdict else rows
        kept.observe(written, F.count(F.lit(1)).alias("rows")).write.format("delta").mode(
            "overwrite"
        ).save(target)
    finally:
        rows.unpersist()
    run.rows_written = int(written.get["rows"])
    if gate:
        gate.forget(spark, model.name, None)
    return verdict


def _views(
    model: Model, sources: Mapping[str, Source], frames: Sequence[DataFrame]
) -> dict[str, str]:
    """The model's inputs as the views its suite's reconciliations read."""
    pinned = {
        name: (frame, s.version) for (name, s), frame in zip(sources.items(), frames, strict=True)
    }
    return input_views(pinned, model.name)


def conform(rows: DataFrame, model: Model, target: DataFrame) -> DataFrame:
    """`rows` in the columns, order and types of the table (`model.columns`)."""
    if missing := [c for c in target.columns if c not in rows.columns]:
        raise LakehouseError(f"{model.name}: its build returns no column {', '.join(missing)}")
    return rows.select(*[F.col(f.name).cast(f.dataType) for f in target.schema.fields])


def pin(spark: SparkSession, name: str, uri: str) -> Source:
    """The table's current version, which the whole run reads."""
    if not catalog.is_delta(spark, uri):
        raise LakehouseError(f"{name} does not exist yet at {uri}: run the layer that builds it")
    found = delta.latest(spark, uri)
    return Source(name, uri, found.version, found.table_id, found.size_bytes)


def changes_between(spark: SparkSession, uri: str, first: int, last: int) -> DataFrame:
    """Delta's change data feed of versions `first`..`last`: inserted, updated (both
    images) and deleted rows."""
    return (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", first)
        .option("endingVersion", last)
        .load(uri)
    )


def _why_full(last: Mapping[str, tuple[int, str]] | None, sources: Mapping[str, Source]) -> str:
    """Why this run must rebuild the whole table, or "" when it can be incremental."""
    if last is None:
        return "first run"
    for name, source in sources.items():
        if name not in last:
            return f"{name} is a new input"
        version, table_id = last[name]
        if table_id != source.table_id or source.version < version:
            return f"{name} was recreated since the last run"
    return ""


def _lost_changes(error: Exception) -> bool:
    text = str(error)
    return any(
        marker in text
        for marker in (
            "DELTA_MISSING_CHANGE_DATA",
            "FileNotFound",
            "DELTA_CHANGE_DATA_FILE_NOT_FOUND",
        )
    )


def _merge(rows: DataFrame, target: str, key: Sequence[str], kept: DataFrame) -> int:
    """Upsert `kept`, the rows of `rows` (persisted) that may be written, into the table
    at `target` by `key`, bounded to the range of keys `rows` hold (gold tables are
    clustered by key); the row of a key whose new row was kept out is deleted, not left
    stale. The number of rows upserted."""
    ends = [agg(k).cast("string") for k in key for agg in (F.min, F.max)]
    bounds = rows.agg(F.count(F.lit(1)), *ends).first()
    assert bounds is not None
    count, lows, highs = bounds[0], bounds[1::2], bounds[2::2]
    if not count:
        return 0
    ranges = dict(zip(key, zip(lows, highs, strict=True), strict=True))
    if kept is rows:
        delta.merge(rows, target, key, key_ranges=ranges)
        return int(count)
    marked = rows.join(kept.select(*key).withColumn(_KEPT, F.lit(True)), list(key), "left")
    delta.merge(marked, target, key, delete_when=f"s.{_KEPT} IS NULL", key_ranges=ranges)
    return int(kept.count())


_KEPT = "lakehouse_kept"


def record_runs(
    spark: SparkSession,
    storage: StorageSettings,
    run_id: str,
    runs: Sequence[ModelRun],
    gate: WriteGate | None = None,
) -> None:
    """The gate's results of `runs`, then their rows in the run log: a commit each for
    all of them. Results first: a crash between the two leaves the models unrecorded,
    run again next time (their results then twice), never recorded without results."""
    with delta.commits_naming(spark, run_id):
        if gate is not None:
            gate.flush(spark)
        _record(spark, storage, run_id, runs)


def _record(
    spark: SparkSession, storage: StorageSettings, run_id: str, runs: Sequence[ModelRun]
) -> None:
    # A run that found nothing changed read what the last one did: the next run starts
    # where that one ended, and the walk's progress row says it ran.
    recorded = [run for run in runs if run.mode != "unchanged"]
    if not recorded:
        return
    rows = [
        (
            run_id,
            run.model,
            run.mode,
            {n: s.version for n, s in run.sources.items()},
            {n: s.table_id for n, s in run.sources.items()},
            run.changed_keys,
            run.rows_written,
            run.started_at,
            run.seconds,
        )
        for run in recorded
    ]
    delta.append(spark.createDataFrame(rows, RUNS.columns), storage.table_uri(RUNS.name))
    read = {r.model: {n: (s.version, s.table_id) for n, s in r.sources.items()} for r in recorded}
    appended(spark, storage, read)
