"""Expectation suites: `expectations/<layer>/<table>.json`, loaded strictly.

A suite file is hand-written JSON: the table, the columns that identify a row (to route
quarantined rows), and the expectations, each a Great Expectations type with its kwargs
plus a name and a severity:

    {"table": "bronze.sensor_records", "row_key": ["topic", "partition", "offset"],
     "time_column": "ingested_at",
     "expectations": [{"name": "key_present", "severity": "quarantine",
                       "type": "expect_column_values_to_not_be_null",
                       "kwargs": {"column": "key"}, "description": "..."}]}

- `fail`: the job stops before the batch commits.
- `quarantine`: the offending rows go to `<layer>.quarantine` with the expectation's name;
  only expectations that judge single rows can quarantine (QUARANTINABLE).
- `warn`: recorded only.

An entry with `"in_stream": false` is left to `lakehouse check`: an expectation over the
whole batch (uniqueness shuffles it) costs a stream more than its writes, and over the
whole table it also sees what no single batch can, e.g. a record repeated across batches.

Great Expectations 1.x logs and drops a suite entry it cannot build when it reads a suite
from its store; here every entry is built on its own and any problem is a `SuiteError`
naming the file and the entry.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, get_args

from lakehouse.core.errors import LakehouseError

Severity = Literal["fail", "quarantine", "warn"]
SEVERITIES: tuple[str, ...] = get_args(Severity)

# What Great Expectations shows for each severity in its reports.
_GX_SEVERITY: dict[str, Any] = {"fail": "critical", "quarantine": "warning", "warn": "info"}

QUARANTINABLE = frozenset(
    {
        "expect_column_values_to_not_be_null",
        "expect_column_values_to_be_in_set",
        "expect_column_values_to_be_between",
        "unexpected_rows_expectation",
    }
)
"""Types whose unexpected rows can be told apart: a column condition, or a query's rows."""

_INPUT = re.compile(r"\{([a-z_]+\.[a-z_0-9]+)\}")
"""A table a query reads besides its batch: `{<layer>.<table>}`."""
_SUITE_KEYS = {"table", "description", "row_key", "time_column", "expectations"}
_ENTRY_KEYS = {"name", "severity", "type", "kwargs", "description", "in_stream"}


class SuiteError(LakehouseError):
    """A suite file that cannot be used as written."""


@dataclass(frozen=True)
class Check:
    """One expectation of a suite, with what its failure does."""

    name: str
    severity: Severity
    type: str
    kwargs: dict[str, Any]
    description: str
    in_stream: bool = True
    """Validated in each micro-batch of the stream; always by `lakehouse check`."""


@dataclass(frozen=True)
class Suite:
    table: str
    """`<layer>.<table>`."""
    row_key: tuple[str, ...]
    checks: tuple[Check, ...]
    description: str
    path: Path
    time_column: str | None = None
    """The column a time window (`lakehouse check --since`) filters on."""

    @property
    def layer(self) -> str:
        return self.table.split(".", 1)[0]

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)

    @cached_property
    def inputs(self) -> tuple[str, ...]:
        """Other tables its queries read, written `{silver.row_changes}`: a reconciliation
        compares the table with what it was built from."""
        queries = (str(c.kwargs.get("unexpected_rows_query", "")) for c in self.checks)
        return tuple(sorted({name for q in queries for name in _INPUT.findall(q)}))

    def bound(self, views: Mapping[str, str]) -> Suite:
        """The suite with each input's placeholder replaced by the view that holds it."""
        if missing := [name for name in self.inputs if name not in views]:
            raise LakehouseError(f"{self.path}: no view given for the inputs {missing}")

        def bind(check: Check) -> Check:
            query = check.kwargs.get("unexpected_rows_query")
            if not isinstance(query, str):
                return check
            for name, view in views.items():
                query = query.replace("{" + name + "}", view)
            return replace(check, kwargs={**check.kwargs, "unexpected_rows_query": query})

        return replace(self, checks=tuple(bind(c) for c in self.checks))

    def in_stream(self) -> Suite:
        """The suite a stream validates each micro-batch with."""
        return replace(self, checks=tuple(c for c in self.checks if c.in_stream))

    def to_gx(self) -> Any:
        """The Great Expectations suite, named after the table."""
        import great_expectations as gx

        return gx.ExpectationSuite(
            name=self.table,
            expectations=[_build_expectation(self.path, c) for c in self.checks],
            meta={"row_key": list(self.row_key), "description": self.description},
        )


def load_suite(path: Path) -> Suite:
    """Read one suite file; every entry must build, or SuiteError names file and entry."""
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise SuiteError(f"{path}:{error.lineno}: not valid JSON ({error.msg})") from None
    if not isinstance(data, dict):
        raise SuiteError(f"{path}: expected a JSON object with table and expectations")
    _no_unknown_keys(path, "the suite", data, _SUITE_KEYS)
    table = data.get("table")
    expected_table = f"{path.parent.name}.{path.stem}"
    if table != expected_table:
        raise SuiteError(
            f"{path}: `table` is {table!r}; a suite in this file is for {expected_table!r}"
        )
    row_key = data.get("row_key")
    if not (isinstance(row_key, list) and row_key and all(isinstance(c, str) for c in row_key)):
        raise SuiteError(f"{path}: `row_key` must be a non-empty list of column names")
    entries = data.get("expectations")
    if not isinstance(entries, list) or not entries:
        raise SuiteError(f"{path}: `expectations` must be a non-empty list")

    checks = tuple(_load_check(path, i, entry) for i, entry in enumerate(entries))
    names = [c.name for c in checks]
    if duplicated := sorted({n for n in names if names.count(n) > 1}):
        raise SuiteError(f"{path}: expectation names must be unique; repeated: {duplicated}")
    time_column = data.get("time_column")
    if time_column is not None and not isinstance(time_column, str):
        raise SuiteError(f"{path}: `time_column` must be a column name")
    suite = Suite(
        table, tuple(row_key), checks, str(data.get("description", "")), path, time_column
    )
    for check in checks:
        _build_expectation(path, check)
    return suite


def load_suites(folder: Path, select: str | None = None) -> list[Suite]:
    """Every suite under `folder`, or those of a layer (`silver`) or a table (`silver.sessions`)."""
    if not folder.is_dir():
        raise SuiteError(f"no suites folder at {folder} (quality.suites)")
    suites = [load_suite(p) for p in sorted(folder.glob("*/*.json"))]
    if select:
        suites = [s for s in suites if select in (s.layer, s.table)]
        if not suites:
            raise SuiteError(f"no suite for {select!r} in {folder} (a layer or <layer>.<table>)")
    return suites


def _load_check(path: Path, index: int, entry: Any) -> Check:
    where = f"{path}: expectation #{index + 1}"
    if not isinstance(entry, dict):
        raise SuiteError(f"{where}: expected an object, got {entry!r}")
    name = entry.get("name")
    if isinstance(name, str):
        where = f"{where} ({name})"
    _no_unknown_keys(path, where, entry, _ENTRY_KEYS)
    for key, kind in (("name", str), ("type", str), ("kwargs", dict)):
        if not isinstance(entry.get(key), kind):
            raise SuiteError(f"{where}: `{key}` must be a {kind.__name__}")
    severity = entry.get("severity")
    if severity not in SEVERITIES:
        raise SuiteError(f"{where}: severity {severity!r} is none of {', '.join(SEVERITIES)}")
    _expectation_class(where, entry["type"])
    if severity == "quarantine" and entry["type"] not in QUARANTINABLE:
        raise SuiteError(
            f"{where}: {entry['type']} judges the whole batch, not single rows, so it cannot "
            f"quarantine; use fail or warn (quarantinable: {', '.join(sorted(QUARANTINABLE))})"
        )
    in_stream = entry.get("in_stream", True)
    if not isinstance(in_stream, bool):
        raise SuiteError(f"{where}: `in_stream` must be true or false")
    return Check(
        entry["name"],
        severity,
        entry["type"],
        entry["kwargs"],
        str(entry.get("description", "")),
        in_stream,
    )


def _expectation_class(where: str, type_name: str) -> Any:
    from great_expectations.exceptions import ExpectationNotFoundError
    from great_expectations.expectations.registry import get_expectation_impl

    try:
        return get_expectation_impl(type_name)
    except ExpectationNotFoundError:
        raise SuiteError(f"{where}: unknown expectation type {type_name!r}") from None


def _build_expectation(path: Path, check: Check) -> Any:
    where = f"{path}: expectation {check.name!r}"
    expectation_class = _expectation_class(where, check.type)
    try:
        return expectation_class(
            **check.kwargs,
            severity=_GX_SEVERITY[check.severity],
            description=check.description or None,
            meta={"name": check.name, "severity": check.severity},
        )
    except Exception as error:  # pydantic's ValidationError: one line per bad field
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in getattr(error, "errors", list)()
        )
        raise SuiteError(f"{where} ({check.type}): {problems or error}") from None


def _no_unknown_keys(path: Path, where: str, data: dict[str, Any], known: set[str]) -> None:
    if unknown := sorted(set(data) - known):
        prefix = where if where.startswith(str(path)) else f"{path}: {where}"
        raise SuiteError(f"{prefix}: unknown keys {unknown} (known: {', '.join(sorted(known))})")
