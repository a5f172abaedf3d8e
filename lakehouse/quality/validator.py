"""Great Expectations over Spark frames: suites in, one `Outcome` per expectation out.

Great Expectations judges; what a failure does (the severity) is the gates' business
(`gates.py`). A suite whose queries read other tables (`{silver.row_changes}`, a
reconciliation) is bound to views of those tables at the versions the caller pinned.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any, Literal

from pyspark.sql import DataFrame

from lakehouse.core.errors import LakehouseError, explain
from lakehouse.quality.store import Outcome
from lakehouse.quality.suites import Suite


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
        self._gx_suites: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}

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

    def _gx_suite(self, table: str, views: Mapping[str, str]) -> Any:
        """The table's suite in Great Expectations, its inputs read from `views`."""
        key = (table, tuple(sorted(views.items())))
        if key not in self._gx_suites:
            bound = self.suites[table].bound(views)
            self._gx_suites[key] = self.context.suites.add_or_update(bound.to_gx())
        return self._gx_suites[key]

    def validate(
        self,
        frame: DataFrame,
        table: str,
        result_format: Literal["BOOLEAN_ONLY", "SUMMARY"] = "BOOLEAN_ONLY",
        only: Sequence[str] = (),
        views: Mapping[str, str] | None = None,
    ) -> list[Outcome]:
        """Run the table's suite (or the expectations named in `only`) on `frame`, which
        the caller has persisted: GX scans it once per metric. `views` names the view of
        each table the suite's queries read (`Suite.inputs`)."""
        suite, gx_suite = self.suites[table], self._gx_suite(table, views or {})
        batch = self._batches[table].get_batch(batch_parameters={"dataframe": frame})
        # GX runs query expectations on its engine's session over a temp view it registers
        # on the frame's session; foreachBatch frames belong to a session of their own.
        batch.data.execution_engine.spark = frame.sparkSession
        if not only:
            return _outcomes(suite, batch.validate(gx_suite, result_format=result_format).results)
        expectations = [e for e in gx_suite.expectations if (e.meta or {}).get("name") in only]
        return _outcomes(
            suite, [batch.validate(e, result_format=result_format) for e in expectations]
        )

    def validate_and_store(
        self,
        frame: DataFrame,
        table: str,
        run_id: str,
        views: Mapping[str, str] | None = None,
    ) -> list[Outcome]:
        """Validate with full detail and keep the result in the context, for the Data Docs."""
        import great_expectations as gx
        from great_expectations.core.run_identifier import RunIdentifier

        definition = self.context.validation_definitions.add_or_update(
            gx.ValidationDefinition(
                name=table, data=self._batches[table], suite=self._gx_suite(table, views or {})
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
