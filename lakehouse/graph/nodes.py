"""The pipeline as one graph of nodes, and dbt's selection syntax over it.

A node is a stream (bronze, silver), a model (each gold table) or a check (a table's
suite over the whole table). Edges come from what nodes read and write: a node runs after
the writers of every table it reads and after those tables' checks, so that a failed
check stops what would read a bad table, as `dbt build` does. Pure: no Spark here;
`pipeline.py` declares the nodes and what running each one means.

Selection (`--select`, `--exclude`), as dbt users write it:

    name          a node: `silver`, `gold.sensor_hourly` or `sensor_hourly`,
                  `check:silver.sessions`, or a table (its writer: `silver.sessions`)
    name+  +name  with everything downstream / upstream of it
    2+name name+1 ... at most that many steps up / down
    layer:gold    every node of a layer
    type:check    every node of a kind (stream, model, check)
    a b           union (separate words)
    a,b           intersection (within a word)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from lakehouse.core.errors import LakehouseError

Kind = Literal["stream", "model", "check"]
KINDS: tuple[Kind, ...] = ("stream", "model", "check")
LAYER_ORDER = ("bronze", "silver", "gold", "quality")

CHECK_PREFIX = "check:"


@dataclass(frozen=True)
class Node:
    """One step of the pipeline: what it reads and writes (tables by name)."""

    name: str
    kind: Kind
    layer: str
    reads: tuple[str, ...] = ()
    """Tables it reads; `kafka` for what comes from the broker."""
    writes: tuple[str, ...] = ()
    description: str = ""
    runs: object = field(default=None, compare=False, repr=False)
    """What running it runs: its stream's declaration, its model or its suite."""

    @property
    def short_name(self) -> str:
        """The name without its layer: `sensor_hourly` for `gold.sensor_hourly`."""
        return self.name.removeprefix(f"{self.layer}.")


def check_name(table: str) -> str:
    return f"{CHECK_PREFIX}{table}"


class SelectionError(LakehouseError):
    """A selector that names nothing, or is not written as one."""


@dataclass(frozen=True)
class Graph:
    """Nodes in dependency order (ties by layer, then name) and their parents."""

    nodes: tuple[Node, ...]
    parents: Mapping[str, frozenset[str]] = field(repr=False)

    def __getitem__(self, name: str) -> Node:
        return self._by_name[name]

    @cached_property
    def _by_name(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    def children(self, name: str) -> set[str]:
        return {n for n, parents in self.parents.items() if name in parents}

    def writer(self, table: str) -> Node | None:
        """The node that writes `table` (checks write only results)."""
        return next((n for n in self.nodes if n.kind != "check" and table in n.writes), None)

    def checks_of(self, names: Iterable[str]) -> list[str]:
        """The check nodes of the tables the named nodes write."""
        written = {t for n in names for t in self[n].writes}
        return [n.name for n in self.nodes if n.kind == "check" and n.reads[0] in written]


def graph_of(nodes: Iterable[Node]) -> Graph:
    """The graph of `nodes`: each after the writers of what it reads and, unless it is a
    check itself, after the checks of what it reads. Refuses two writers of one table, a
    name used twice and a cycle."""
    nodes = list(nodes)
    by_name: dict[str, Node] = {}
    writers: dict[str, str] = {}
    for node in nodes:
        if node.name in by_name:
            raise LakehouseError(f"two nodes are named {node.name}")
        by_name[node.name] = node
        if node.kind == "check":
            continue
        for table in node.writes:
            if table in writers:
                raise LakehouseError(f"{table} is written by both {writers[table]} and {node.name}")
            writers[table] = node.name
    checks = {n.reads[0]: n.name for n in nodes if n.kind == "check"}
    parents: dict[str, frozenset[str]] = {}
    for node in nodes:
        found = {writers[t] for t in node.reads if t in writers}
        if node.kind != "check":
            found |= {checks[t] for t in node.reads if t in checks}
        parents[node.name] = frozenset(found - {node.name})
    order: list[Node] = []
    pending = dict(by_name)
    while pending:
        ready = [n for name, n in pending.items() if not parents[name] & set(pending)]
        if not ready:
            raise LakehouseError(f"nodes depend on each other in a cycle: {sorted(pending)}")
        ready.sort(key=lambda n: (_layer_rank(n.layer), n.kind == "check", n.name))
        order.append(ready[0])  # one at a time, so ties fall in layer order
        del pending[ready[0].name]
    return Graph(tuple(order), parents)


def _layer_rank(layer: str) -> int:
    return LAYER_ORDER.index(layer) if layer in LAYER_ORDER else len(LAYER_ORDER)


_ATOM = re.compile(r"(?P<up>(?P<up_depth>\d*)\+)?(?P<body>[^+]+)(?P<down>\+(?P<down_depth>\d*))?")


def select(graph: Graph, selectors: Sequence[str], exclude: Sequence[str] = ()) -> list[Node]:
    """The nodes `selectors` name (all without any), less those `exclude` names, in
    dependency order. Each selector is one or more words: words unite, commas intersect."""
    chosen = _union(graph, selectors) if selectors else {n.name for n in graph.nodes}
    chosen -= _union(graph, exclude)
    return [n for n in graph.nodes if n.name in chosen]


def _union(graph: Graph, selectors: Sequence[str]) -> set[str]:
    words = [word for selector in selectors for word in selector.split()]
    found: set[str] = set()
    for word in words:
        parts = [_atom(graph, part) for part in word.split(",") if part]
        if not parts:
            raise SelectionError(f"empty selector {word!r}")
        found |= set.intersection(*parts)
    return found


def _atom(graph: Graph, text: str) -> set[str]:
    match = _ATOM.fullmatch(text)
    if match is None:
        raise SelectionError(f"selector {text!r} is not name, name+, +name, n+name or method:value")
    names = _named(graph, match["body"])
    found = set(names)
    if match["up"]:
        found |= _walk(names, lambda n: graph.parents[n], _depth(match["up_depth"]))
    if match["down"]:
        found |= _walk(names, graph.children, _depth(match["down_depth"]))
    return found


def _depth(text: str) -> int | None:
    return int(text) if text else None


def _named(graph: Graph, body: str) -> set[str]:
    method, _, value = body.partition(":") if ":" in body else ("", "", body)
    if method == "layer":
        found = {n.name for n in graph.nodes if n.layer == value}
    elif method == "type":
        if value not in KINDS:
            raise SelectionError(f"type:{value}: the types are {', '.join(KINDS)}")
        found = {n.name for n in graph.nodes if n.kind == value}
    elif method == "check":
        found = {body} if body in graph.parents else set()
    elif method:
        raise SelectionError(f"selector {body!r}: methods are layer:, type: and check:")
    else:
        writer = graph.writer(body)
        found = {n.name for n in graph.nodes if body in (n.name, n.short_name)}
        found |= {writer.name} if writer and not found else set()
    if not found:
        known = ", ".join(n.name for n in graph.nodes)
        raise SelectionError(f"selector {body!r} names no node (nodes: {known})")
    return found


def _walk(start: set[str], step: Callable[[str], Iterable[str]], depth: int | None) -> set[str]:
    """Every node reachable from `start` by `step` in at most `depth` steps (None: any)."""
    seen: set[str] = set()
    frontier, taken = set(start), 0
    while frontier and (depth is None or taken < depth):
        frontier = {m for n in frontier for m in step(n)} - seen - start
        seen |= frontier
        taken += 1
    return seen
