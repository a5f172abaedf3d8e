"""Batch models (gold), declared where they are written, and their dependency order.

A model is a table computed from other tables, declared by `@model` on the function that
builds it: what it reads, its grain (`key`), its columns, and two more pure functions:
which keys a set of input changes touches, and how to narrow the inputs to those keys.
The table is named after the function (`gold.sensor_hourly` is built by `sensor_hourly`
in `gold/sensor_hourly.py`), and models are found by scanning their package, so a new
model is one new file. Pure: `lakehouse.runtime.incremental` runs them.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TypeVar

from pyspark.sql import DataFrame

from lakehouse.core.errors import LakehouseError
from lakehouse.core.tables import TableSpec

Build = TypeVar("Build", bound=Callable[..., DataFrame])


@dataclass(frozen=True)
class Model:
    """A table computed from `reads`; one row per `key`. Each function takes its frames
    in the order of `reads`."""

    table: TableSpec
    reads: tuple[str, ...]
    key: tuple[str, ...]
    build: Callable[..., DataFrame]
    """The rows of the table from its inputs (pure)."""
    changed_keys: Callable[..., DataFrame]
    """The keys whose rows the given input changes (change data feed rows) touch."""
    narrow: Callable[..., tuple[DataFrame, ...]]
    """`narrow(keys, *inputs)`: the inputs cut down to what those keys' rows come from."""

    @property
    def name(self) -> str:
        return self.table.name


_DECLARED: dict[str, Model] = {}


def model(
    *,
    reads: Sequence[str],
    key: Sequence[str],
    columns: str,
    changed_keys: Callable[..., DataFrame],
    narrow: Callable[..., tuple[DataFrame, ...]],
    cluster_by: Sequence[str] | None = None,
) -> Callable[[Build], Build]:
    """Declare the decorated function as the build of the table named after it, in its
    module's layer; its docstring's first line is the table's grain. The table is
    clustered by `key` unless `cluster_by` says otherwise."""

    def declare(build: Build) -> Build:
        name = f"{build.__module__.split('.')[0]}.{build.__name__}"
        grain = (build.__doc__ or name).strip().splitlines()[0]
        table = TableSpec(
            name,
            grain,
            columns,
            writer="lakehouse run gold",
            cluster_by=tuple(cluster_by or key),
            change_feed=True,
        )
        _DECLARED[name] = Model(table, tuple(reads), tuple(key), build, changed_keys, narrow)
        return build

    return declare


def declared_models(package: ModuleType) -> list[Model]:
    """Every model declared in the modules of `package`, found by importing them all."""
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{info.name}")
    prefix = f"{package.__name__}."
    return [m for name, m in sorted(_DECLARED.items()) if name.startswith(prefix)]


def dependency_waves(models: Iterable[Model]) -> list[list[Model]]:
    """Models in waves: a model reads none of its own wave or of later ones (reads outside
    `models` do not count), so the models of a wave can run at once; ties by name."""
    pending = {m.name: m for m in models}
    waves: list[list[Model]] = []
    while pending:
        ready = sorted(n for n, m in pending.items() if not set(m.reads) & set(pending))
        if not ready:
            raise LakehouseError(f"models read each other in a cycle: {sorted(pending)}")
        waves.append([pending.pop(n) for n in ready])
    return waves


def dependency_order(models: Iterable[Model]) -> list[Model]:
    """Models so that each comes after the models it reads; ties by name."""
    return [m for wave in dependency_waves(models) for m in wave]
