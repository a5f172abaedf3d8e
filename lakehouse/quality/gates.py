"""Running the suites: in the streams (per micro-batch, before commit) and over whole tables.

Great Expectations judges; this module applies the severity, because GX's `success`
ignores it: `fail` stops the job, `quarantine` diverts the offending rows to
`<layer>.quarantine`, `warn` only records. Every validation appends one row per
expectation to its writer's results table (the view `quality.expectation_results` unites
them), so quality over time is a SQL query.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cached_property, reduce
from typing import Any, Literal

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from lakehouse import catalog, delta
from lakehouse.delta import Txn
from lakehouse.errors import LakehouseError, explain
from lakehouse.quality.suites import QUARANTINABLE, Check, Suite, load_suites
from lakehouse.settings import QualitySettings, StorageSettings
from lakehouse.tables import TableSpec

RESULT_COLUMNS = """
    run_id STRING NOT NULL, mode STRING NOT NULL, layer STRING NOT NULL,
    table_name STRING NOT NULL, batch_id BIGINT, expectation STRING NOT NULL,
    expectation_type STRING NOT NULL, severity STRING NOT NULL, success BOOLEAN NOT NULL,
    observed_value STRING, unexpected_count BIGINT, element_count BIGINT,
    quarantined BIGINT, validated_at TIMESTAMP NOT NULL
"""
WRITERS = ("bronze", "silver", "check")
"""The applications that validate: the two streams and `lakehouse check`."""
RESULTS_VIEW = "quality.expectation_results"
"""Every writer's results as one view in the catalog, for SQL."""


def results(writer: str) -> TableSpec:
    """`quality.<writer>_expectation_results`: one table per validating application, so
    that each table has one writer (on S3, Delta's log is safe for one writer only)."""
    return TableSpec(
        name=f"quality.{writer}_expectation_results",
        grain="one row per expectation run on a micro-batch or a table",
        columns=RESULT_COLUMNS,
        writer=f"the {writer} stream" if writer != "check" else "lakehouse check",
    )


def read_results(spark: SparkSession, storage: StorageSettings) -> DataFrame | None:
    """Every writer's results as one frame; None before any validation ran."""
    found = [
        spark.read.format("delta").load(uri)
        for uri in (storage.table_uri(results(w).name) for w in WRITERS)
        if catalog.is_delta(spark, uri)
    ]
    return reduce(DataFrame.unionByName, found) if found else None


def quarantine(layer: str) -> TableSpec:
    """`<layer>.quarantine`: one row per quarantined row: the whole row as JSON (binary
    columns base64, so bytes survive), the expectation that caught it, and its Kafka
    lineage to find it again."""
    return TableSpec(
        name=f"{layer}.quarantine",
        grain="one row per row a suite quarantined",
        columns="""
            table_name STRING NOT NULL, expectation STRING NOT NULL, row_json STRING NOT NULL,
            topic STRING, partition INT, offset BIGINT, batch_id BIGINT NOT NULL,
            quarantined_at TIMESTAMP NOT NULL
        """,
        writer=f"the {layer} stream",
    )


_BATCH_VIEW = "lakehouse_quality_batch"


class QualityError(LakehouseError):
    """A `fail` expectation did not hold: the batch (or check) must not pass."""


@dataclass(frozen=True)
class Outcome:
    """What one expectation found in one frame."""

    check: Check
    success: bool
    observed_value: str | None = None
    unexpected_count: int | None = None
    element_count: int | None = None
    quarantined: int | None = None
    first_at: str | None = None
    """Kafka lineage (`topic/partition@offset`) of the first offending row, where known."""

    @property
    def found(self) -> str:
        """What the expectation saw, e.g. `unexpected 3, quarantined 3`."""
        return ", ".join(
            f"{label} {value:,}" if isinstance(value, int) else f"{label} {value}"
            for label, value in (
                ("unexpected", self.unexpected_count),
                ("observed", self.observed_value),
                ("quarantined", self.quarantined),
                ("first at", self.first_at),
            )
            # a query expectation observes its count of unexpected rows: say it once
            if value is not None
            and not (label == "observed" and value == str(self.unexpected_count))
        )

    def describe(self) -> str:
        found = self.found
        return f"{self.check.name} ({self.check.severity})" + (f": {found}" if found else "")


def create_tables(
    spark: SparkSession, storage: StorageSettings, writer: str, layers: Sequence[str]
) -> None:
    """The writer's results table and the quarantine tables of `layers`; the view over
    every writer's results."""
    for spec in (results(writer), *(quarantine(layer) for layer in layers)):
        delta.create(spark, spec, storage.table_uri(spec.name))
    # This lake's results only: the catalog may name another lake's, on storage now gone.
    tables = [
        spec.name
        for spec in (results(w) for w in WRITERS)
        if catalog.names(spark, spec.name, storage.table_uri(spec.name))
    ]
    union = " UNION ALL ".join(f"SELECT * FROM {t}" for t in tables)
    spark.sql(f"CREATE OR REPLACE VIEW {RESULTS_VIEW} AS {union}")


class Validator:
    """Great Expectations over Spark frames, one context for the life of a job.

    Building a context and registering suites costs seconds, so it is built once, on first
    use: a stream validates every micro-batch with the same one, and a stream whose
    expectations all judge single rows (`row_condition`) may never need it. An ephemeral
    context keeps nothing on disk; `check` passes a file context so that its results feed
    the Data Docs.
    """

    def __init__(self, suites: Sequence[Suite], context: Any = None) -> None:
        self.suites = {s.table: s for s in suites}
        self._context = context

    @cached_property
    def context(self) -> Any:
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig

        # GX logs every metric it cannot resolve at WARNING and draws a progress bar per
        # validation; our own progress lines and one-line errors say what matters.
        logging.getLogger("great_expectations").setLevel(logging.ERROR)
        context = self._context or gx.get_context(mode="ephemeral")
        context.variables.progress_bars = ProgressBarsConfig(
            globally=False, metric_calculations=False
        )
        return context

    @cached_property
    def _batches(self) -> dict[str, Any]:
        source = self.context.data_sources.add_or_update_spark("lakehouse", persist=False)
        # One asset per table, so that the Data Docs name what was validated.
        return {
            table: source.add_dataframe_asset(table).add_batch_definition_whole_dataframe(
                "whole table"
            )
            for table in self.suites
        }

    @cached_property
    def _gx_suites(self) -> dict[str, Any]:
        return {
            table: self.context.suites.add_or_update(suite.to_gx())
            for table, suite in self.suites.items()
        }

    def validate(
        self,
        frame: DataFrame,
        table: str,
        result_format: Literal["BOOLEAN_ONLY", "SUMMARY"] = "BOOLEAN_ONLY",
        only: Sequence[str] = (),
    ) -> list[Outcome]:
        """Run the table's suite (or the expectations named in `only`) on `frame`, which
        the caller has persisted: GX scans it once per metric."""
        suite = self.suites[table]
        batch = self._batches[table].get_batch(batch_parameters={"dataframe": frame})
        # GX runs query expectations on its engine's session over a temp view it registers
        # on the frame's session; foreachBatch frames belong to a session of their own.
        batch.data.execution_engine.spark = frame.sparkSession
        if not only:
            return _outcomes(
                suite, batch.validate(self._gx_suites[table], result_format=result_format).results
            )
        expectations = [
            e for e in self._gx_suites[table].expectations if (e.meta or {}).get("name") in only
        ]
        return _outcomes(
            suite, [batch.validate(e, result_format=result_format) for e in expectations]
        )

    def validate_and_store(self, frame: DataFrame, table: str, run_id: str) -> list[Outcome]:
        """Validate with full detail and keep the result in the context, for the Data Docs."""
        import great_expectations as gx
        from great_expectations.core.run_identifier import RunIdentifier

        definition = self.context.validation_definitions.add_or_update(
            gx.ValidationDefinition(
                name=table, data=self._batches[table], suite=self._gx_suites[table]
            )
        )
        result = definition.run(
            batch_parameters={"dataframe": frame},
            result_format="SUMMARY",
            run_id=RunIdentifier(run_name=run_id),
        )
        return _outcomes(self.suites[table], result.results)


def _outcomes(suite: Suite, results: list[Any]) -> list[Outcome]:
    outcomes = []
    for item in results:
        check = suite.check(item.expectation_config.meta["name"])
        raised = _raised(item.exception_info or {})
        if raised is not None:
            raise LakehouseError(
                f"{suite.path}: expectation {check.name!r} could not run on {suite.table}: "
                f"{explain(_cause_text(raised))}"
            )
        details = item.result or {}
        observed = details.get("observed_value")
        unexpected = details.get("unexpected_count")
        if check.type == "unexpected_rows_expectation" and isinstance(observed, int):
            unexpected = observed  # what it observes is the number of unexpected rows
        outcomes.append(
            Outcome(
                check,
                bool(item.success),
                None if observed is None else json.dumps(observed, default=str),
                unexpected,
                details.get("element_count"),
            )
        )
    return outcomes


def stream_gates(
    spark: SparkSession, settings: QualitySettings, storage: StorageSettings, layer: str
) -> Callable[[Txn], BatchGate]:
    """A gate per micro-batch of a stream over `layer`, with the layer's suites; a
    pass-through when `quality.validate_streams` is off."""
    if not settings.validate_streams:
        return lambda txn: BatchGate(None, storage, layer, txn, "")
    create_tables(spark, storage, layer, [layer])
    streamed = [s.in_stream() for s in load_suites(settings.suites_dir, layer)]
    validator = Validator([s for s in streamed if s.checks])
    run_id = new_run_id()
    return lambda txn: BatchGate(validator, storage, layer, txn, run_id)


def _cause_text(raised: dict[str, Any]) -> str:
    """What GX kept of an exception: its traceback, then its message."""
    return "\n".join(
        str(raised.get(key) or "") for key in ("exception_traceback", "exception_message")
    )


def _raised(info: dict[str, Any]) -> dict[str, Any] | None:
    """The exception an expectation raised, if any; GX nests it per metric on failure."""
    if info.get("raised_exception"):
        return info
    nested = (v for v in info.values() if isinstance(v, dict) and v.get("raised_exception"))
    return next(nested, None)


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

    def admit(self, frame: DataFrame, table: str) -> DataFrame:
        """The rows of `frame` that may be written: all of them unless a quarantine
        expectation failed. `frame` must be persisted by the caller."""
        if self.validator is None or table not in self.validator.suites:
            return frame
        self.spark = frame.sparkSession  # foreachBatch's own session: writes must use it
        # Fills the cache, and lets a failing read (lost offsets, a broker gone) fail here
        # as itself rather than inside an expectation.
        frame.count()
        outcomes = self.validator.validate(frame, table)
        if failed := [o.check.name for o in outcomes if not o.success]:
            # BOOLEAN_ONLY says nothing of how bad a failure is: ask the failed ones again.
            detail = {
                o.check.name: o for o in self.validator.validate(frame, table, "SUMMARY", failed)
            }
            outcomes = [detail.get(o.check.name, o) for o in outcomes]
        kept, final = frame, []
        for outcome in outcomes:
            if not outcome.success and outcome.check.severity == "fail":
                # The batch stops here: say which record to look at.
                final.append(replace(outcome, first_at=first_offending(frame, outcome.check)))
                continue
            if outcome.success or outcome.check.severity != "quarantine":
                final.append(outcome)
                continue
            offending = offending_rows(frame, outcome.check, self.validator.suites[table])
            rows = offending.count()
            self.quarantined.append(_quarantine_rows(offending, table, outcome.check, self.txn))
            kept = without_rows(kept, offending, self.validator.suites[table].row_key)
            final.append(replace(outcome, quarantined=rows))
        self.outcomes[table] = final
        return kept

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
        metrics = [F.count(F.lit(1)).alias(_ROWS)]
        metrics += [F.count_if(u).alias(c.name) for c, u in judged]
        keep = ~_any(u for c, u in judged if c.severity == "quarantine")
        if fails := [u for c, u in judged if c.severity == "fail"]:
            keep = F.when(_any(fails), F.raise_error(F.lit(_FAIL_ROW))).otherwise(keep)
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
            found = counts[check.name]
            quarantined = None
            if found and check.severity == "quarantine":
                offending = frame.where(condition)
                self.quarantined.append(_quarantine_rows(offending, table, check, self.txn))
                quarantined = found
            query = check.type == "unexpected_rows_expectation"
            self.outcomes[table].append(
                Outcome(
                    check,
                    success=found == 0,
                    observed_value=str(found) if query else None,
                    unexpected_count=found,
                    element_count=counts[_ROWS],
                    quarantined=quarantined,
                )
            )
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
        before, for a batch that rebuilds the layer); raise if a `fail` expectation failed.

        A failing batch records its results outside the transaction and quarantines
        nothing, so that the replay after the suite or the data is fixed writes all of it.
        """
        spark, validator = self.spark or spark, self.validator
        if spark is None or validator is None:  # nothing was validated
            if rebuild and spark is not None:
                self._divert(spark, rebuild)
            return
        failed = [
            (table, o)
            for table, outcomes in self.outcomes.items()
            for o in outcomes
            if not o.success and o.check.severity == "fail"
        ]
        found = results_frame(
            spark, self.run_id, "stream", self.layer, self.outcomes, self.txn.version
        )
        if failed:
            delta.append(found, self.storage.table_uri(results(self.layer).name))
            table, outcome = failed[0]
            raise QualityError(
                f"{table} batch {self.txn.version}: expectation {outcome.check.name} (fail) "
                f"failed{': ' + outcome.found if outcome.found else ''}; "
                f"the batch was not committed (suite {validator.suites[table].path})"
            )
        delta.append(found, self.storage.table_uri(results(self.layer).name), self.txn)
        self._divert(spark, rebuild)

    def _divert(self, spark: SparkSession, rebuild: bool) -> None:
        """Append the quarantined rows; a rebuild replaces those of before with them."""
        diverted = self.storage.table_uri(quarantine(self.layer).name)
        if self.quarantined:
            rows = reduce(DataFrame.unionByName, self.quarantined)
            (delta.replace if rebuild else delta.append)(rows, diverted, self.txn)
        elif rebuild and catalog.is_delta(spark, diverted):
            delta.replace(spark.read.format("delta").load(diverted).limit(0), diverted, self.txn)


def offending_rows(frame: DataFrame, check: Check, suite: Suite) -> DataFrame:
    """The rows of `frame` that `check` (a quarantinable expectation) finds unexpected."""
    if check.type == "unexpected_rows_expectation":
        frame.createOrReplaceTempView(_BATCH_VIEW)
        query = check.kwargs["unexpected_rows_query"].replace("{batch}", _BATCH_VIEW)
        keys = frame.sparkSession.sql(query)
        if missing := [c for c in suite.row_key if c not in keys.columns]:
            raise LakehouseError(
                f"{suite.path}: expectation {check.name!r} quarantines, so its query must "
                f"return the row key {list(suite.row_key)}; it lacks {missing}"
            )
        return frame.join(keys.select(*suite.row_key).distinct(), list(suite.row_key), "left_semi")
    return frame.where(F.coalesce(_unexpected(check), F.lit(False)))


_UNIQUENESS = ("expect_compound_columns_to_be_unique", "expect_column_values_to_be_unique")


def first_offending(frame: DataFrame, check: Check) -> str | None:
    """`topic/partition@offset` of the first row (in Kafka order) that `check` finds
    unexpected, or None where the expectation judges no rows or the frame has no lineage."""
    lineage = ["topic", "partition", "offset"]
    if not set(lineage) <= set(frame.columns):
        return None
    if check.type == "unexpected_rows_expectation":
        frame.createOrReplaceTempView(_BATCH_VIEW)
        query = check.kwargs["unexpected_rows_query"].replace("{batch}", _BATCH_VIEW)
        keys = frame.sparkSession.sql(query)
        shared = [c for c in keys.columns if c in frame.columns]
        if not shared:
            return None
        rows = frame.join(keys.select(*shared).distinct(), shared, "left_semi")
    elif check.type in (
        "expect_compound_columns_to_be_unique",
        "expect_column_values_to_be_unique",
    ):
        columns = list(check.kwargs.get("column_list") or [check.kwargs["column"]])
        repeated = frame.groupBy(*columns).count().where("count > 1").select(*columns)
        rows = frame.join(repeated, columns, "left_semi")
    elif check.type in QUARANTINABLE:
        rows = frame.where(F.coalesce(_unexpected(check), F.lit(False)))
    else:
        return None
    first = rows.select(*lineage).orderBy(*lineage).first()
    return None if first is None else f"{first.topic}/{first.partition}@{first.offset}"


_ROWS = "lakehouse_rows"
_FAIL_ROW = "lakehouse: a row failed a fail expectation"
_QUERY_OF_ROWS = re.compile(
    r"\s*SELECT\s+.+?\s+FROM\s+\{batch\}\s+WHERE\s+(?P<condition>.+?)[\s;]*", re.I | re.S
)
_NOT_ONE_ROW = re.compile(
    r"\b(SELECT|FROM|JOIN|GROUP|HAVING|OVER|WINDOW|LIMIT|UNION|ORDER|LAG|LEAD)\b", re.I
)
_ROW_KWARGS = {
    "expect_column_values_to_not_be_null": {"column"},
    "expect_column_values_to_be_in_set": {"column", "value_set"},
    "expect_column_values_to_be_between": {"column", "min_value", "max_value"},
    "unexpected_rows_expectation": {"unexpected_rows_query"},
}


def row_condition(check: Check) -> Column | None:
    """When one row is unexpected to `check`, where `check` judges each row on its own by
    a condition this module can state exactly as Great Expectations does; None otherwise
    (e.g. uniqueness, `mostly`, or a query with a window), which GX then evaluates.

    A query is row by row when it reads `SELECT ... FROM {batch} WHERE <condition>` with
    no subquery, join, grouping or window: its unexpected rows are those the condition
    holds for.
    """
    if not set(check.kwargs) <= _ROW_KWARGS.get(check.type, set()):
        return None
    if check.type != "unexpected_rows_expectation":
        return _unexpected(check)
    query = _QUERY_OF_ROWS.fullmatch(check.kwargs["unexpected_rows_query"])
    if query is None or _NOT_ONE_ROW.search(query["condition"]):
        return None
    return F.expr(query["condition"])


def _observed(observation: Observation) -> dict[str, Any] | None:
    """What `observation` saw, or None where its frame never ran. PySpark's `get` would wait
    for ever; the JVM's own answer waits at most 100 ms."""
    seen = observation._jo.getRowOrEmpty() if observation._jo is not None else None
    return observation.get if seen is not None and seen.isDefined() else None


def _any(conditions: Iterable[Column]) -> Column:
    return reduce(Column.__or__, conditions, F.lit(False))


def without_rows(frame: DataFrame, rows: DataFrame, row_key: Sequence[str]) -> DataFrame:
    """`frame` less `rows`, matched by `row_key`, in `frame`'s column order."""
    keys = rows.select(*row_key).distinct()
    return frame.join(keys, list(row_key), "left_anti").select(*frame.columns)


def _unexpected(check: Check) -> Column:
    column = F.col(check.kwargs["column"])
    if check.type == "expect_column_values_to_not_be_null":
        return column.isNull()
    if check.type == "expect_column_values_to_be_in_set":
        return column.isNotNull() & ~column.isin(list(check.kwargs["value_set"]))
    low, high = check.kwargs.get("min_value"), check.kwargs.get("max_value")
    outside = [column < low] if low is not None else []
    outside += [column > high] if high is not None else []
    return _any(outside)


def _quarantine_rows(offending: DataFrame, table: str, check: Check, txn: Txn) -> DataFrame:
    lineage = [
        F.col(c) if c in offending.columns else F.lit(None).cast(t).alias(c)
        for c, t in (("topic", "string"), ("partition", "int"), ("offset", "bigint"))
    ]
    return offending.select(
        F.lit(table).alias("table_name"),
        F.lit(check.name).alias("expectation"),
        F.to_json(F.struct(*offending.columns)).alias("row_json"),
        *lineage,
        F.lit(txn.version).cast("bigint").alias("batch_id"),
        F.current_timestamp().alias("quarantined_at"),
    )


def results_frame(
    spark: SparkSession,
    run_id: str,
    mode: str,
    layer: str,
    outcomes: dict[str, list[Outcome]],
    batch_id: int | None,
) -> DataFrame:
    """One row per expectation run, in the columns of the results tables."""
    now = datetime.now(UTC)
    rows = [
        (
            run_id,
            mode,
            table.split(".", 1)[0] if layer == "*" else layer,
            table,
            batch_id,
            o.check.name,
            o.check.type,
            o.check.severity,
            o.success,
            o.observed_value,
            o.unexpected_count,
            o.element_count,
            o.quarantined,
            now,
        )
        for table, table_outcomes in outcomes.items()
        for o in table_outcomes
    ]
    return spark.createDataFrame(rows, RESULT_COLUMNS)


def new_run_id() -> str:
    return f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"


def quarantined_rows(
    spark: SparkSession, storage: StorageSettings, table: str, schema: str
) -> DataFrame:
    """The rows the table's suite quarantined, restored to the table's own `schema`,
    with the expectation that caught each."""
    layer = table.split(".", 1)[0]
    return (
        spark.read.format("delta")
        .load(storage.table_uri(quarantine(layer).name))
        .where(F.col("table_name") == table)
        .select("expectation", F.from_json("row_json", schema).alias("row"))
        .select("row.*", "expectation")
    )


def quarantine_counts(spark: SparkSession, storage: StorageSettings, table: str) -> dict[str, int]:
    """Rows of `table` in its layer's quarantine, by the expectation that caught them."""
    path = storage.table_uri(quarantine(table.split(".", 1)[0]).name)
    if not catalog.is_delta(spark, path):
        return {}
    counts = (
        spark.read.format("delta")
        .load(path)
        .where(F.col("table_name") == table)
        .groupBy("expectation")
        .count()
        .collect()
    )
    return {row["expectation"]: row["count"] for row in sorted(counts)}
