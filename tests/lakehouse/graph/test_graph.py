"""The pipeline's graph and dbt's selection syntax over it, without Spark."""

from __future__ import annotations

import pytest

from lakehouse import definitions as pipeline
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import load_settings
from lakehouse.graph.nodes import Graph, Node, SelectionError, check_name, graph_of, select


def check(table: str, *inputs: str) -> Node:
    return Node(check_name(table), "check", table.split(".")[0], (table, *inputs))


# bronze -> silver -> a -> b -> c, and d beside them; every table but c has a check.
GRAPH = graph_of(
    [
        Node("bronze", "stream", "bronze", ("kafka",), ("bronze.r",)),
        Node("silver", "stream", "silver", ("bronze.r",), ("silver.s", "silver.t")),
        Node("gold.a", "model", "gold", ("silver.s",), ("gold.a",)),
        Node("gold.b", "model", "gold", ("gold.a",), ("gold.b",)),
        Node("gold.c", "model", "gold", ("gold.b",), ("gold.c",)),
        Node("gold.d", "model", "gold", ("silver.t",), ("gold.d",)),
        check("bronze.r"),
        check("silver.s"),
        check("gold.a", "silver.s"),
        check("gold.b"),
    ]
)


def names(*selectors: str, exclude: tuple[str, ...] = ()) -> list[str]:
    return [n.name for n in select(GRAPH, selectors, exclude)]


def test_a_node_runs_after_the_writers_of_what_it_reads_and_their_checks() -> None:
    assert GRAPH.parents["silver"] == {"bronze", "check:bronze.r"}
    assert GRAPH.parents["gold.b"] == {"gold.a", "check:gold.a"}
    # a check waits for what it reconciles with, but not for that table's own check
    assert GRAPH.parents["check:gold.a"] == {"gold.a", "silver"}
    order = [n.name for n in GRAPH.nodes]
    for name, parents in GRAPH.parents.items():
        assert all(order.index(p) < order.index(name) for p in parents), name


def test_a_bare_name_selects_only_that_node_by_full_short_or_table_name() -> None:
    assert names("gold.b") == names("b") == ["gold.b"]
    assert names("silver.t") == ["silver"]  # a table: its writer
    assert names("check:gold.a") == ["check:gold.a"]


def test_plus_after_selects_downstream_and_plus_before_upstream() -> None:
    assert names("gold.b+") == ["gold.b", "check:gold.b", "gold.c"]
    assert names("+gold.a") == ["bronze", "check:bronze.r", "silver", "check:silver.s", "gold.a"]


def test_a_number_bounds_the_steps_taken() -> None:
    assert names("1+gold.b") == ["gold.a", "check:gold.a", "gold.b"]
    assert names("gold.a+1") == ["gold.a", "check:gold.a", "gold.b"]
    assert names("gold.a+2") == ["gold.a", "check:gold.a", "gold.b", "check:gold.b", "gold.c"]


def test_layer_and_type_methods() -> None:
    assert names("layer:silver") == ["silver", "check:silver.s"]
    assert names("type:stream") == ["bronze", "silver"]


def test_words_unite_and_commas_intersect() -> None:
    assert names("gold.c gold.d") == names("gold.c", "gold.d") == ["gold.d", "gold.c"]
    assert names("layer:gold,type:check") == ["check:gold.a", "check:gold.b"]
    assert names("gold.a+,type:model") == ["gold.a", "gold.b", "gold.c"]


def test_exclude_takes_away_from_the_selection_or_from_everything() -> None:
    assert names("gold.a+", exclude=("type:check",)) == ["gold.a", "gold.b", "gold.c"]
    assert "bronze" not in names(exclude=("bronze",)) and len(names(exclude=("bronze",))) == 9


def test_no_selection_is_every_node_in_order() -> None:
    assert names() == [n.name for n in GRAPH.nodes] and len(names()) == 10


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("gold.z", "names no node"),
        ("layer:platinum", "names no node"),
        ("type:table", "the types are stream, model, check"),
        ("tag:x", "methods are layer:, type: and check:"),
        ("a++b", "is not name, name+"),
        (",", "empty selector"),
    ],
)
def test_a_selector_that_names_nothing_is_an_error_that_says_why(
    selector: str, message: str
) -> None:
    with pytest.raises(SelectionError, match=message):
        select(GRAPH, [selector])


def test_two_writers_of_one_table_and_cycles_are_refused() -> None:
    with pytest.raises(LakehouseError, match=r"gold\.a is written by both"):
        graph_of([Node("x", "model", "gold", (), ("gold.a",)), *GRAPH.nodes])
    with pytest.raises(LakehouseError, match="cycle"):
        graph_of(
            [Node("gold.p", "model", "gold", ("gold.q",), ("gold.p",)),
             Node("gold.q", "model", "gold", ("gold.p",), ("gold.q",))]
        )  # fmt: skip


def test_the_pipelines_graph_checks_every_table_that_has_a_suite_before_its_readers() -> None:
    graph: Graph = pipeline.graph(load_settings("local"))
    kinds = {n.name: n.kind for n in graph.nodes}
    assert [n for n, k in kinds.items() if k == "stream"] == ["bronze", "silver"]
    assert {n for n, k in kinds.items() if k == "model"} == {m.name for m in pipeline.MODELS}
    assert {"check:gold.sensor_hourly", "check:silver.row_changes"} <= set(kinds)
    assert graph.parents["gold.sensor_hourly"] == {"silver", "check:silver.row_changes"}
    # gold.sensor_hourly's suite reconciles with silver.row_changes: its check reads it
    assert graph.parents["check:gold.sensor_hourly"] == {"gold.sensor_hourly", "silver"}
    assert graph.parents["gold.sensor_daily"] == {"gold.sensor_hourly", "check:gold.sensor_hourly"}


@pytest.mark.parametrize(
    ("selectors", "exclude", "expected"),
    [
        (("gold.sensor_daily",), (), ["gold.sensor_daily"]),
        (
            ("sensor_hourly+",),
            (),
            ["gold.sensor_hourly", "check:gold.sensor_hourly", "gold.sensor_daily",
             "check:gold.sensor_daily"],
        ),
        (("+sensor_daily",), ("layer:bronze", "type:check"),
         ["silver", "gold.sensor_hourly", "gold.sensor_daily"]),
        (("1+gold.sensor_daily",), (),
         ["gold.sensor_hourly", "check:gold.sensor_hourly", "gold.sensor_daily"]),
        (
            ("layer:gold,type:check", "silver.sessions"),
            (),
            ["silver", "check:gold.sensor_hourly", "check:gold.sensor_daily",
             "check:gold.session_summary"],
        ),
    ],
)  # fmt: skip
def test_selectors_over_the_pipelines_graph_select_in_run_order(
    selectors: tuple[str, ...], exclude: tuple[str, ...], expected: list[str]
) -> None:
    graph = pipeline.graph(load_settings("local"))
    assert [n.name for n in select(graph, selectors, exclude)] == expected
