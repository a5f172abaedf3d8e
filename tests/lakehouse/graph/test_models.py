"""Model ordering, without Spark (selection: test_graph.py)."""

from __future__ import annotations

import pytest

from lakehouse.core.errors import LakehouseError
from lakehouse.core.tables import TableSpec
from lakehouse.definitions import MODELS
from lakehouse.graph.models import Model, dependency_order, dependency_waves


def names(models: list[Model]) -> list[str]:
    return [m.name for m in models]


def model(name: str, *reads: str) -> Model:
    return Model(
        TableSpec(name, "one row per k", "k INT", "test"), reads, ("k",), print, print, print
    )


def test_models_run_after_the_models_they_read() -> None:
    order = names(dependency_order(MODELS))
    assert order.index("gold.sensor_hourly") < order.index("gold.sensor_daily")
    assert set(order) == {"gold.session_summary", "gold.sensor_hourly", "gold.sensor_daily"}


def test_models_that_do_not_read_each_other_share_a_wave() -> None:
    waves = dependency_waves(
        [model("gold.d", "gold.b", "gold.c"), model("gold.b", "gold.a"), model("gold.c"),
         model("gold.a", "silver.x")]
    )  # fmt: skip

    assert [names(wave) for wave in waves] == [["gold.a", "gold.c"], ["gold.b"], ["gold.d"]]
    # a selection's waves ignore the models it leaves out
    daily = [m for m in MODELS if m.name == "gold.sensor_daily"]
    assert [names(w) for w in dependency_waves(daily)] == [["gold.sensor_daily"]]


def test_a_cycle_is_an_error_naming_its_models() -> None:
    with pytest.raises(LakehouseError, match="cycle"):
        dependency_order([model("gold.a", "gold.b"), model("gold.b", "gold.a")])
