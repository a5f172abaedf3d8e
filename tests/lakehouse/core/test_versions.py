"""The lake's versions of its layers (`core/versions.py`): what each `lakehouse shadow`
step makes of them, and which running parts go on after each."""

from __future__ import annotations

import pytest

from lakehouse.core import versions
from lakehouse.core.versions import VersionError, Versions


def test_a_shadow_of_silver_holds_gold_too_and_a_swap_and_its_undoing_exchange_the_tags() -> None:
    first = Versions()
    shadow = versions.start(first, "silver")
    assert (shadow.other, shadow.parts, shadow.state) == ("v2", ("silver", "gold"), "shadow")
    assert shadow.tags(False) == {"silver": "v1", "gold": "v1"}
    assert shadow.tags(True) == {"silver": "v2", "gold": "v2"}

    swapped = versions.swap(shadow)
    assert swapped.tags(False) == {"silver": "v2", "gold": "v2"}
    assert (swapped.other, swapped.state) == ("v1", "swapped")
    back = versions.swap(swapped, back=True)
    assert back.tags(False) == {"silver": "v1", "gold": "v1"}
    assert (back.other, back.state) == ("v2", "shadow")

    kept = versions.drop(versions.swap(back))
    assert kept.tags(False) == {"silver": "v2", "gold": "v2"} and kept.other is None
    assert versions.start(kept, "gold").other == "v3"  # never a tag used before
    assert Versions.of_json(swapped.as_json()) == swapped


def test_a_gold_shadow_reads_the_live_silver() -> None:
    gold = versions.start(Versions(), "gold")
    assert gold.tags(True) == {"silver": "v1", "gold": "v2"}
    assert versions.swap(gold).tags(False) == {"silver": "v1", "gold": "v2"}


def test_the_live_version_goes_on_until_swapped_out_and_the_shadow_through_swaps() -> None:
    shadow = versions.start(Versions(), "silver")
    swapped = versions.swap(shadow)
    back = versions.swap(swapped, back=True)
    # (part, tag of the process) -> goes on under: the shadow, after the swap, after --back
    goes_on = {
        ("silver", "v1"): [True, False, True],
        ("gold", "v1"): [True, False, True],
        ("silver", "v2"): [True, True, True],  # the shadow's process: live, then a shadow again
    }
    for (part, tag), expected in goes_on.items():
        assert [v.continues(part, tag) for v in (shadow, swapped, back)] == expected, (part, tag)


@pytest.mark.parametrize(
    ("step", "says"),
    [
        (lambda v: versions.start(versions.start(v, "silver"), "gold"), "one version beside"),
        (lambda v: versions.swap(v), "no shadow to swap in"),
        (lambda v: versions.swap(v, back=True), "no swap to undo"),
        (lambda v: versions.swap(versions.start(v, "silver"), back=True), "no swap to undo"),
        (lambda v: versions.drop(v), "no version beside the live one"),
        (lambda v: versions.swap(versions.start(v, "gold")).tags(True), "shadow drop"),
        (lambda v: versions.start(v, "bronze"), "one of silver, gold"),
    ],
)
def test_a_step_the_versions_do_not_allow_is_refused_with_what_to_do(step, says) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(VersionError, match=says):
        step(Versions())


def test_only_later_versions_have_folders_of_their_own() -> None:
    tags = {"silver": "v2", "gold": "v1"}
    folders = versions.folders({"silver": ("silver.sessions",), "gold": ("gold.x",)}, tags)
    assert folders == {"silver.sessions": "__v2", "gold.x": ""}
    assert versions.tag_of("__v2") == "v2" and versions.tag_of("") == "v1"
    assert versions.is_versioned("file:///lake/silver/sessions__v12/")
    assert not versions.is_versioned("file:///lake/silver/sessions")
    assert not versions.is_versioned("file:///lake/silver/sessions__v0")


def test_a_name_belongs_on_its_parts_live_version_only() -> None:
    shadow = versions.start(Versions(), "silver")
    swapped = versions.swap(shadow)
    gold_again = versions.swap(versions.start(versions.drop(swapped), "gold"))  # gold v3
    # (table, tag of the writer's folder) -> may name it: beside the shadow, after the
    # swap, after gold's own swap (silver stays at v2, v2's gold retired)
    may_name = {
        ("silver.sessions", "v1"): [True, False, False],
        ("silver.sessions", "v2"): [False, True, True],
        ("gold.session_summary", "v1"): [True, False, False],
        ("gold.session_summary", "v2"): [False, True, False],
        ("ops.gold_progress", "v3"): [False, False, True],
        ("bronze.sensor_records", "v1"): [True, True, True],
    }
    for (name, tag), expected in may_name.items():
        found = [versions.names(v, name, tag) for v in (shadow, swapped, gold_again)]
        assert found == expected, (name, tag)


def test_a_tables_folder_gives_its_lakes_root_and_its_versions_tag() -> None:
    assert versions.lake_of("gold.x", "s3a://b/lake/gold/x__v3/") == ("s3a://b/lake", "v3")
    assert versions.lake_of("gold.x", "file:///lake/gold/x") == ("file:///lake", "v1")
    assert versions.lake_of("gold.x", "file:///lake/gold/y") is None
    assert versions.part_of("quality.silver_expectation_results") == "silver"
    assert versions.part_of("quality.bronze_expectation_results") is None
