"""The scenario parser: the default scenario reads whole, and each kind of mistake is one
line naming the step and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakehouse.core.errors import LakehouseError
from lakehouse.gameday.scenario import DEFAULT, KINDS, Load, Step, load_scenario, parse


def test_the_default_scenario_names_every_fault_kind_once_and_a_load_phase() -> None:
    scenario = load_scenario(DEFAULT)
    kinds = [s.kind for s in scenario.steps]
    assert set(kinds) == set(KINDS)
    assert scenario.load == Load(rate=100.0, multiply=10.0, seconds=60.0)
    assert (
        Step("kill", stream="bronze", moment="after-commit").name == "kill bronze at after-commit"
    )


def test_a_step_given_by_name_alone_takes_its_defaults_and_numbers_become_floats() -> None:
    scenario = parse({"steps": ["baseline", {"broker-stop": {"seconds": 5}}], "load": None})
    assert scenario.steps == (Step("baseline"), Step("broker-stop", seconds=5.0))
    assert scenario.load is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"steps": []}, "`steps` must be a list of one or more faults"),
        ({"steps": ["flood"]}, "step 1: unknown ['flood']"),
        ({"steps": [{"kill": {"moment": "lunch"}}]}, "step 1 (kill): moment 'lunch' is none of"),
        ({"steps": [{"kill": {"seconds": 3}}]}, "step 1 (kill): unknown ['seconds']"),
        ({"steps": ["baseline", {"long-stop": {"seconds": "ten"}}]},
         "step 2 (long-stop): seconds must be a float, found 'ten'"),
        ({"steps": [{"long-stop": {"seconds": 0}}]}, "must be greater than 0"),
        ({"steps": [{"baseline": {}, "kill": {}}]}, "one fault a step"),
        ({"steps": ["baseline"], "traffic": {"faults": {"fire": 1}}},
         "traffic.faults: unknown ['fire']"),
        ({"steps": ["baseline"], "load": {"rate": True}}, "load: rate must be a float"),
        ({"steps": ["baseline"], "traffic": {"sensors": 1, "sessions_per_sensor": 1,
                                             "faults": {"gap": 2}}},
         "traffic: 2 faults but 1 sessions a step"),
        ({"steps": ["baseline"], "when": "now"}, "the scenario: unknown ['when']"),
    ],
)  # fmt: skip
def test_a_wrong_scenario_is_one_line_naming_where(data: object, message: str) -> None:
    with pytest.raises(ValueError, match="") as raised:
        parse(data)
    assert message in str(raised.value)


def test_a_scenario_file_that_is_not_yaml_names_the_file(tmp_path: Path) -> None:
    broken = tmp_path / "day.yaml"
    broken.write_text("steps: [baseline\n")
    with pytest.raises(LakehouseError, match=rf"scenario {broken}: "):
        load_scenario(broken)
    broken.write_text("steps: [nap]\n")
    with pytest.raises(LakehouseError, match=r"day.yaml: step 1: unknown \['nap'\]"):
        load_scenario(broken)
