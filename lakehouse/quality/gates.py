"""Quality gates: what a failed expectation does to a write, the same for every writer.

Great Expectations judges (`validator.py`); a gate applies the severity, which GX's
`success` ignores: `fail` stops the write, `quarantine` diverts the offending rows to
`<layer>.quarantine`, `warn` only records. `judge` is that policy over one frame; a
stream applies it to each micro-batch under the batch's transaction (`BatchGate`), a gold
model to its output before the MERGE or overwrite (`WriteGate`), and `lakehouse check`
reports it over whole tables.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import reduce
from pathlib import Path
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import QualitySettings, StorageSettings
from lakehouse.observe import progress
from lakehouse.quality.conditions import (
    ROWS,
    any_of,
    first_offending,
    offending_rows,
    row_condition,
    unexpected_counts,
    without_rows,
)
from lakehouse.quality.store import (
    RESULT_COLUMNS,
    Outcome,
    create_tables,
    new_run_id,
    quarantine_frame,
    quarantine_table,
    quarantined,
    result_rows,
    results_frame,
    results_table,
)
from lakehouse.quality.suites import Check, load_suites
from lakehouse.quality.validator import Validator
from lakehouse.storage import catalog, delta
from lakehouse.storage.delta import Txn

_FAIL_ROW = "lakehouse: a row failed a fail expectation"


class QualityError(LakehouseError):
    """A `fail` expectation did not hold: the batch (or check) must not pass."""


@dataclass(frozen=True)
class Verdict:
    """What the gate decided for one frame: the rows that may be written, one outcome per
    expectation, and the rows to divert (in the quarantine table's columns)."""

    kept: DataFrame
    outcomes: list[Outcome]
    quarantined: list[DataFrame]

    @property
    def failed(self) -> list[Outcome]:
        """Outcomes of `fail` expectations that did not hold: the write must not happen."""
        return [o for o in self.outcomes if not o.success and o.check.severity == "fail"]


def judge(
    validator: Validator,
    frame: DataFrame,
    table: str,
    views: Mapping[str, str] | None = None,
) -> Verdict:
    """Validate `frame` (persisted by the caller) against the table's suite and apply the
    severities: a failed `fail` expectation is located (its first offending row), a failed
    `quarantine` one takes its rows out, `warn` only records."""
    suite = validator.suites[table]
    bound = suite.bound(views or {}) if suite.inputs else suite
    # Counted in Spark first, in a job per query and one for the rest: where nothing but
    # warnings failed, that is the verdict, and Great Expectations (a job per metric,
    # seconds for a gold model) is not asked. It is where something must be located or
    # taken out. Either way the first job fills the cache, and a failing read (lost
    # offsets, a broker gone) fails there as itself rather than inside an expectation.
    counts = unexpected_counts(frame, bound.checks)
    if counts is None:
        frame.count()
    elif all(counts[c.name] == 0 or c.severity == "warn" for c in bound.checks):
        return Verdict(frame, [counted_outcome(c, counts) for c in bound.checks], [])
    outcomes = validator.validate(frame, table, views=views)
    if failed := [o.check.name for o in outcomes if not o.success]:
        # BOOLEAN_ONLY says nothing of how bad a failure is: ask the failed ones again.
        detail = {
            o.check.name: o
            for o in validator.validate(frame, table, "SUMMARY", failed, views=views)
        }
        outcomes = [detail.get(o.check.name, o) for o in outcomes]
    kept, final, diverted = frame, [], []
    for outcome in outcomes:
        check = bound.check(outcome.check.name)
        if not outcome.success and check.severity == "fail":
            final.append(replace(outcome, first_at=first_offending(frame, check)))
        elif outcome.success or check.severity != "quarantine":
            final.append(outcome)
        else:
            offending = offending_rows(frame, check, bound)
            rows = offending.count()
            diverted.append(quarantine_frame(offending, table, check))
            kept = without_rows(kept, offending, suite.row_key)
            final.append(replace(outcome, quarantined=rows))
    return Verdict(kept, final, diverted)


def failure_line(table: str, where: str, outcome: Outcome, suite: Path, left: str) -> str:
    """The one line a failed `fail` expectation stops a write with; `left`: what that
    leaves (`the batch was not committed`)."""
    found = f": {outcome.found}" if outcome.found else ""
    return (
        f"{table} {where}: expectation {outcome.check.name} (fail) failed{found}; "
        f"{left} (suite {suite})"
    )


def stream_gates(
    spark: SparkSession, settings: QualitySettings, storage: StorageSettings, layer: str
) -> Callable[[Txn], BatchGate]:
    """A gate per micro-batch of a stream over `layer`, with the layer's suites; a
    pass-through when `quality.validate_streams` is off."""
    recorder = progress.listen(spark)
    if not settings.validate_streams:
        return lambda txn: BatchGate(None, storage, layer, txn, "", recorder=recorder)
    create_tables(spark, storage, layer, [layer])
    streamed = [s.in_stream() for s in load_suites(settings.suites_dir, layer)]
    validator = Validator([s for s in streamed if s.checks])
    run_id = new_run_id()
    return lambda txn: BatchGate(validator, storage, layer, txn, run_id, recorder=recorder)


@dataclass
class BatchGate:
    """The quality gate of one micro-batch: validate each table's frame, keep the good rows,
    then record results and quarantined rows under the batch's transaction.

    Without a validator (validation switched off) every row passes and nothing is recorded.
    """

    validator: Validator | None
    storage: StorageSettings
    layer: str
    txn: Txn
    run_id: str
    outcomes: dict[str, list[Outcome]] = field(default_factory=dict)
    quarantined: list[DataFrame] = field(default_factory=list)
    spark: SparkSession | None = None
    recorder: progress.Recorder | None = None
    """Where the stream's batch progress gets what the gate wrote and quarantined."""

    def admit(self, frame: DataFrame, table: str) -> DataFrame:
        """The rows of `frame` that may be written: all of them unless a quarantine
        expectation failed. `frame` must be persisted by the caller."""
        if self.validator is None or table not in self.validator.suites:
            return frame
        self.spark = frame.sparkSession  # foreachBatch's own session: writes must use it
        verdict = judge(self.validator, frame, table)
        self.outcomes[table] = verdict.outcomes
        self.quarantined += verdict.quarantined
        return verdict.kept

    def append(self, frame: DataFrame, table: str, location: str) -> None:
        """Validate `frame`, append the rows it admits to the Delta table at `location`,
        and record results and quarantined rows, all under the batch's transaction.

        Where every expectation judges single rows (`row_condition`), the batch is judged
        in the pass that writes it: one read of the source, no cache. A `fail` row stops
        that pass before Delta commits; the batch is then judged again by Great
        Expectations, which names what failed and where. Otherwise Great Expectations
        judges a cached batch first (`admit`).
        """
        suite = self.validator.suites.get(table) if self.validator else None
        if suite is None:
            delta.append(frame, location, self.txn)
            return
        conditions = [(c, row_condition(c)) for c in suite.checks]
        if any(condition is None for _, condition in conditions):
            self._append_admitted(frame, table, location)
            return
        self.spark = frame.sparkSession
        judged = [(c, F.coalesce(u, F.lit(False))) for c, u in conditions if u is not None]
        observation = Observation()
        metrics = [F.count(F.lit(1)).alias(ROWS)]
        metrics += [F.count_if(u).alias(c.name) for c, u in judged]
        keep = ~any_of(u for c, u in judged if c.severity == "quarantine")
        if fails := [u for c, u in judged if c.severity == "fail"]:
            keep = F.when(any_of(fails), F.raise_error(F.lit(_FAIL_ROW))).otherwise(keep)
        try:
            delta.append(frame.observe(observation, *metrics).where(keep), location, self.txn)
        except Exception as error:
            if _FAIL_ROW not in str(error):
                raise
            # Great Expectations judges the batch again: its QualityError names the row.
            self._append_admitted(frame, table, location)
            return
        # Delta skips the write of a batch it already holds (a replay after a crash), and
        # then nothing was observed: count again, for results that are still missing.
        counts = _observed(observation) or frame.agg(*metrics).collect()[0].asDict()
        self.outcomes[table] = []
        for check, condition in judged:
            outcome = counted_outcome(check, counts)
            if outcome.unexpected_count and check.severity == "quarantine":
                offending = frame.where(condition)
                self.quarantined.append(quarantine_frame(offending, table, check))
                outcome = replace(outcome, quarantined=outcome.unexpected_count)
            self.outcomes[table].append(outcome)
        self.commit()

    def _append_admitted(self, frame: DataFrame, table: str, location: str) -> None:
        frame.persist()  # Great Expectations scans the batch once per metric: read it once
        try:
            admitted = self.admit(frame, table)
            self.commit()
            delta.append(admitted, location, self.txn)
        finally:
            frame.unpersist()

    def commit(self, rebuild: bool = False, spark: SparkSession | None = None) -> None:
        """Record results and quarantined rows (`rebuild`: instead of those quarantined
        before, for a batch that rebuilds the layer); raise if a `fail` expectation failed:
        `refuse_failures`, then `record`."""
        self.refuse_failures(spark)
        self.record(rebuild, spark)

    def refuse_failures(self, spark: SparkSession | None = None) -> None:
        """Raise if a `fail` expectation failed, before anything of the batch is written.

        A failing batch records its results outside the transaction and quarantines
        nothing, so that the replay after the suite or the data is fixed writes all of it.
        """
        spark, validator = self.spark or spark, self.validator
        if spark is None or validator is None:  # nothing was validated
            return
        failed = [
            (table, o)
            for table, outcomes in self.outcomes.items()
            for o in outcomes
            if not o.success and o.check.severity == "fail"
        ]
        if not failed:
            return
        found = results_frame(
            spark, self.run_id, "stream", self.layer, self.outcomes, self.txn.version
        )
        delta.append(found, self.storage.table_uri(results_table(self.layer).name))
        table, outcome = failed[0]
        raise QualityError(
            failure_line(
                table,
                f"batch {self.txn.version}",
                outcome,
                validator.suites[table].path,
                "the batch was not committed",
            )
        )

    def record(self, rebuild: bool = False, spark: SparkSession | None = None) -> None:
        """Append the results and quarantined rows of a batch `refuse_failures` let pass,
        under its transaction; `rebuild`: instead of those quarantined before."""
        spark = self.spark or spark
        if spark is None or self.validator is None:  # nothing was validated
            if rebuild and spark is not None:
                self._divert(spark, rebuild)
            return
        found = results_frame(
            spark, self.run_id, "stream", self.layer, self.outcomes, self.txn.version
        )
        delta.append(found, self.storage.table_uri(results_table(self.layer).name), self.txn)
        self._divert(spark, rebuild)
        diverted = sum(o.quarantined or 0 for os in self.outcomes.values() for o in os)
        if self.recorder is not None:
            self.recorder.note(self.txn, rows_written=self.offered, quarantined_rows=diverted)

    @property
    def offered(self) -> dict[str, int]:
        """Rows offered to each table the gate judged (before any was quarantined)."""
        return {
            table: max(o.element_count for o in outcomes if o.element_count is not None)
            for table, outcomes in self.outcomes.items()
            if any(o.element_count is not None for o in outcomes)
        }

    def _divert(self, spark: SparkSession, rebuild: bool) -> None:
        """Append the quarantined rows; a rebuild replaces those of before with them."""
        diverted = self.storage.table_uri(quarantine_table(self.layer).name)
        if self.quarantined:
            rows = quarantined(self.quarantined, self.txn.version)
            (delta.replace if rebuild else delta.append)(rows, diverted, self.txn)
        elif rebuild and catalog.is_delta(spark, diverted) and delta.latest(spark, diverted).files:
            delta.replace(spark.read.format("delta").load(diverted).limit(0), diverted, self.txn)


def counted_outcome(check: Check, counts: Mapping[str, int]) -> Outcome:
    """The outcome of `check` from `counts` of unexpected rows (`ROWS`: the frame's rows),
    in the terms Great Expectations reports it."""
    found = counts[check.name]
    query = check.type == "unexpected_rows_expectation"
    return Outcome(
        check,
        success=found == 0,
        observed_value=str(found) if query else None,
        unexpected_count=found,
        element_count=counts[ROWS],
    )


def _observed(observation: Observation, wait_s: float = 0.1) -> dict[str, Any] | None:
    """What `observation` saw, or None where its frame never ran. PySpark's `get` would wait
    for ever: the JVM's answer is waited for at most `wait_s` (Spark's listener bus hands it
    over just after the action)."""
    if observation._jo is None:
        return None
    answer, deadline = observation._jo.future(), time.monotonic() + wait_s
    while not answer.isCompleted() and time.monotonic() < deadline:
        time.sleep(0.005)
    return observation.get if answer.isCompleted() else None


@dataclass
class WriteGate:
    """The quality gate of a batch write (a gold model's output): `judge` the rows before
    the MERGE or overwrite, then `record` results and quarantined rows, and `flush` the
    results of every model of the run in one commit.

    A failed `fail` expectation records its results and raises, so the table is left as
    it was. Quarantined rows are appended after the table's write, results at the run's
    end, before its run log: a crash in between leaves the model's run unrecorded too, so
    its next run does it again (and may quarantine the same rows a second time).
    """

    validator: Validator
    storage: StorageSettings
    layer: str
    run_id: str
    _made: bool = False
    """The results and quarantine tables exist: made by the first record, so that a walk
    whose models all find their inputs unchanged opens neither."""
    _results: list[tuple[Any, ...]] = field(default_factory=list)
    """Results recorded and not yet flushed: a commit for each model's would cost a
    second or so of a run of small models."""

    def _make_tables(self, spark: SparkSession) -> None:
        if not self._made:
            create_tables(spark, self.storage, self.layer, [self.layer])
            self._made = True

    def judge(self, frame: DataFrame, table: str, views: Mapping[str, str]) -> Verdict:
        """The verdict on `frame` (persisted by the caller); raise if a `fail` failed."""
        if table not in self.validator.suites:
            return Verdict(frame, [], [])
        verdict = judge(self.validator, frame, table, views)
        if verdict.failed:
            self.record(frame.sparkSession, table, verdict)
            suite = self.validator.suites[table].path
            raise QualityError(
                failure_line(table, "run", verdict.failed[0], suite, "nothing was written")
            )
        return verdict

    def forget(self, spark: SparkSession, table: str, keys: DataFrame | None) -> None:
        """Remove the rows quarantined for `table` at `keys` (a frame of its key columns;
        None: all of its rows), which its run has just written again: each is in the
        table now, or quarantined again by this run. Quarantine follows the rows it holds
        back; a stale one would excuse a row in the whole-table reconciliations."""
        diverted = self.storage.table_uri(quarantine_table(self.layer).name)
        if table not in self.validator.suites or not catalog.is_delta(spark, diverted):
            return
        target = DeltaTable.forPath(spark, diverted)
        if not target.toDF().where(F.col("table_name") == table).take(1):
            return  # nothing held back: no MERGE, no commit, on every run of every model
        if keys is None:
            target.delete(F.col("table_name") == table)
            return
        # The row's key read back from its JSON, typed as the key (a timestamp's text
        # casts back to the instant it was).
        same_key = [
            F.get_json_object("q.row_json", f"$.{c}").cast(keys.schema[c].dataType)
            == F.col(f"k.`{c}`")
            for c in keys.columns
        ]
        on = reduce(Column.__and__, [F.col("q.table_name") == F.lit(table), *same_key])
        target.alias("q").merge(keys.alias("k"), on).whenMatchedDelete().execute()

    def record(self, spark: SparkSession, table: str, verdict: Verdict) -> None:
        if not verdict.outcomes:
            return
        self._make_tables(spark)
        self._results += result_rows(
            self.run_id, "run", self.layer, {table: verdict.outcomes}, None
        )
        if verdict.quarantined:
            rows = quarantined(verdict.quarantined, None)
            delta.append(rows, self.storage.table_uri(quarantine_table(self.layer).name))

    def flush(self, spark: SparkSession) -> None:
        """Append the results recorded since the last flush, in one commit."""
        if self._results:
            found = spark.createDataFrame(self._results, RESULT_COLUMNS)
            delta.append(found, self.storage.table_uri(results_table(self.layer).name))
            self._results.clear()


def write_gate(settings: QualitySettings, storage: StorageSettings, layer: str) -> WriteGate:
    """The gate of a batch job's writes to `layer`, with the layer's suites (those not
    left to `lakehouse check`)."""
    suites = [s.in_stream() for s in load_suites(settings.suites_dir, layer)]
    return WriteGate(Validator([s for s in suites if s.checks]), storage, layer, new_run_id())


def input_views(
    inputs: Mapping[str, tuple[DataFrame, int]], reader: str = "check"
) -> dict[str, str]:
    """Register each input frame (a table as of a version) as a temporary view; the view
    of each table, for a suite's reconciliation queries. Named by reader and version, so
    that models running at once never read each other's."""
    views = {}
    for name, (frame, version) in inputs.items():
        suffix = f"v{version}" if version >= 0 else "latest"  # -1: as the table is now
        views[name] = "_".join(
            ("lakehouse_input", reader.replace(".", "__"), name.replace(".", "__"), suffix)
        )
        frame.createOrReplaceTempView(views[name])
    return views
