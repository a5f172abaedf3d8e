"""A game day's scenario: the traffic each step sends, its faults in order, and the load
phase. Read from YAML (`conf/gameday/default.yaml` is the default), checked whole before anything
runs: a scenario that names an unknown fault or a wrong field is one line, not a failure
half-way through a day."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from lakehouse import PROJECT_ROOT
from lakehouse.core.errors import LakehouseError
from lakehouse.ops.producer import FAULTS as TRAFFIC_FAULTS

DEFAULT = PROJECT_ROOT / "conf" / "gameday" / "default.yaml"

MOMENTS = ("before-writes", "after-delta-commit", "after-commit")
"""Moments of a stream's batch at which `kill` strikes: once it has planned the batch (its
offsets written), once the batch's Delta commit is in the table but not the checkpoint's
commit, once the checkpoint's commit is written."""
STREAMS = ("bronze", "silver")


@dataclass(frozen=True)
class Step:
    """One fault and what it waits for. `kind` decides which fields it reads."""

    kind: str
    stream: str = "silver"
    moment: str = "before-writes"
    seconds: float = 20.0
    hours: float = 48.0
    records: int = 5

    @property
    def name(self) -> str:
        """How the console names it: `kill silver at before-writes`."""
        match self.kind:
            case "kill":
                return f"kill {self.stream} at {self.moment}"
            case "retention-loss":
                return f"retention-loss of {self.records} records"
            case "clock-ahead":
                return f"clock-ahead by {self.hours:g} h"
            case "baseline" | "worker-kill":
                return self.kind
        return f"{self.kind} for {self.seconds:g} s"


KINDS: dict[str, tuple[str, ...]] = {
    "baseline": (),
    "kill": ("stream", "moment"),
    "broker-stop": ("seconds",),
    "store-outage": ("seconds",),
    "worker-kill": (),
    "retention-loss": ("records",),
    "clock-ahead": ("hours",),
    "long-stop": ("seconds",),
}
"""Each fault and the fields it takes. `baseline`: traffic and no fault."""


@dataclass(frozen=True)
class Load:
    """The load phase: `rate` records/s for `seconds`, then `multiply` times that."""

    rate: float = 200.0
    multiply: float = 10.0
    seconds: float = 30.0


@dataclass(frozen=True)
class Traffic:
    """What each step sends (the generator's spec; a step's seed is its own)."""

    sensors: int = 2
    sessions_per_sensor: int = 2
    rows_per_snapshot: int = 10
    updates_per_session: int = 40
    resync_every: int = 15
    faults: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Scenario:
    name: str
    steps: tuple[Step, ...]
    traffic: Traffic = Traffic()
    load: Load | None = Load()


def load_scenario(path: Path = DEFAULT) -> Scenario:
    """The scenario in `path`; one line naming the file and the field when it is wrong."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise LakehouseError(f"scenario {path}: {str(error).splitlines()[0]}") from None
    try:
        return parse(data, default_name=path.stem)
    except ValueError as error:
        raise LakehouseError(f"scenario {path}: {error}") from None


def parse(data: Any, default_name: str = "scenario") -> Scenario:
    """A scenario from its YAML's data; ValueError names what is wrong, and where."""
    top = _mapping(data, "the scenario", {"name", "steps", "traffic", "load"})
    steps = top.get("steps")
    if not isinstance(steps, list) or not steps:
        raise ValueError("`steps` must be a list of one or more faults")
    traffic = _fields(Traffic, top.get("traffic") or {}, "traffic")
    unknown = set(traffic.faults) - set(TRAFFIC_FAULTS)
    if unknown:
        raise ValueError(f"traffic.faults: unknown {sorted(unknown)}; known: {TRAFFIC_FAULTS}")
    sessions = traffic.sensors * traffic.sessions_per_sensor
    if sum(traffic.faults.values()) > sessions:
        raise ValueError(
            f"traffic: {sum(traffic.faults.values())} faults but {sessions} sessions a step; "
            "each fault needs a session of its own"
        )
    load = top.get("load", {})
    return Scenario(
        name=str(top.get("name", default_name)),
        steps=tuple(_step(item, n) for n, item in enumerate(steps, 1)),
        traffic=traffic,
        load=None if load is None else _fields(Load, load, "load"),
    )


def _step(item: Any, number: int) -> Step:
    where = f"step {number}"
    if isinstance(item, str):
        item = {item: {}}
    one = _mapping(item, where, set(KINDS))
    if len(one) != 1:
        raise ValueError(f"{where}: one fault a step, found {sorted(one)}")
    [(kind, given)] = one.items()
    where = f"{where} ({kind})"
    step = _fields(Step, {"kind": kind, **_mapping(given or {}, where, set(KINDS[kind]))}, where)
    if step.stream not in STREAMS:
        raise ValueError(f"{where}: stream {step.stream!r} is none of {', '.join(STREAMS)}")
    if step.moment not in MOMENTS:
        raise ValueError(f"{where}: moment {step.moment!r} is none of {', '.join(MOMENTS)}")
    if step.seconds <= 0 or step.hours <= 0 or step.records <= 0:
        raise ValueError(f"{where}: seconds, hours and records must be greater than 0")
    return step


def _mapping(value: Any, where: str, known: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected a mapping, found {value!r}")
    unknown = set(value) - known
    if unknown:
        raise ValueError(f"{where}: unknown {sorted(unknown)}; known: {', '.join(sorted(known))}")
    return value


def _fields(cls: Any, value: Any, where: str) -> Any:
    """`cls` from a mapping of its fields, each of its default's type."""
    defaults = {
        f.name: f.default if f.default is not MISSING else f.default_factory()  # type: ignore[operator]
        for f in fields(cls)
        if f.default is not MISSING or f.default_factory is not MISSING
    }
    given = _mapping(value, where, {f.name for f in fields(cls)})
    typed = {}
    for name, raw in given.items():
        kind = type(defaults[name]) if name in defaults else str
        if kind is float and isinstance(raw, int) and not isinstance(raw, bool):
            raw = float(raw)
        if not isinstance(raw, kind) or isinstance(raw, bool):
            raise ValueError(f"{where}: {name} must be a {kind.__name__}, found {raw!r}")
        typed[name] = raw
    return cls(**typed)
