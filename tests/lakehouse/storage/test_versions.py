"""Where the lake keeps its versions, and what a command on a version works on: one change
at a time kept, its folders and leases apart from the live ones, never settable in conf."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakehouse.core import versions
from lakehouse.core.errors import LakehouseError, SettingsError
from lakehouse.core.settings import load_settings
from lakehouse.definitions import TABLES, VERSIONED, at_versions
from lakehouse.storage import versions as stored
from tests.support import overrides


def test_of_two_changes_read_at_the_same_generation_one_is_kept_and_commands_see_it(
    tmp_path: Path,
) -> None:
    settings = load_settings("local", environ=overrides(tmp_path, "127.0.0.1:9", "s."))
    before = stored.read(settings)
    assert before == versions.Versions()  # a lake without any: its first version throughout
    kept = stored.write(settings, before, versions.start(before, "silver"))
    with pytest.raises(LakehouseError, match="changed while this command ran"):
        stored.write(settings, before, versions.start(before, "gold"))
    assert stored.read(settings) == kept and kept.generation == 1

    live, shadow = at_versions(settings), at_versions(settings, shadow=True)
    assert live.storage.table_uri("silver.sessions").endswith("/lake/silver/sessions")
    assert shadow.storage.table_uri("silver.sessions").endswith("/lake/silver/sessions__v2")
    assert shadow.storage.checkpoint_uri("silver.sessions_stream").endswith("sessions_stream__v2")
    assert shadow.storage.table_uri("bronze.sensor_records").endswith("/bronze/sensor_records")
    assert shadow.storage.versioned("ops.silver_progress") == "ops.silver_progress__v2"
    assert all(shadow.storage.versioned(t).endswith("__v2") for t in VERSIONED["gold"])


def test_the_versions_a_command_works_on_are_the_lakes_not_a_setting(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    base = (Path(__file__).parents[3] / "conf" / "base.yaml").read_text()
    (conf / "base.yaml").write_text(
        base.replace("  lease_seconds: 60", "  lease_seconds: 60\n  versions: {}")
    )
    (conf / "local.yaml").write_text("{}\n")
    with pytest.raises(SettingsError, match=r"unknown key 'storage\.versions'"):
        load_settings("local", environ={"LAKEHOUSE_CONF_DIR": str(conf)})


def test_code_below_the_definitions_finds_a_tables_part_as_the_definitions_list_it() -> None:
    for name in {*TABLES, *(n for names in VERSIONED.values() for n in names)}:
        listed = [part for part, names in VERSIONED.items() if name in names]
        assert versions.part_of(name) == (listed[0] if listed else None), name
