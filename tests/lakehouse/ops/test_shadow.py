"""The catalog's names against the lake's versions (`ops/shadow.py`), from plain dicts:
which disagree, and what each line says."""

from __future__ import annotations

from lakehouse.core import versions
from lakehouse.core.versions import Versions
from lakehouse.ops import shadow

LIVE = {
    "silver.sessions": "file:///lake/silver/sessions__v2",
    "gold.a": "file:///lake/gold/a__v2",
    "gold.b": None,  # the live version has not made it
    "gold.c": None,
    "gold.d": "file:///lake/gold/d__v2",
}
BESIDE = {name: f"file:///lake/{name.replace('.', '/')}" for name in LIVE}


def test_a_name_on_the_retired_version_or_on_nothing_disagrees_and_another_lakes_does_not() -> None:
    named = {
        "silver.sessions": "file:/lake/silver/sessions__v2",  # the catalog's spelling
        "gold.a": "file:///lake/gold/a",  # still on the retired version
        "gold.b": "file:///other-lake/gold/b",  # another lake's, of a table not made here
        "gold.c": "file:///lake/gold/c",  # on the retired version, not made live
        "gold.d": None,
    }
    found = shadow.misnamed(named, LIVE, BESIDE)
    assert [(m.name, m.points_at, m.should) for m in found] == [
        ("gold.a", "file:///lake/gold/a", "file:///lake/gold/a__v2"),
        ("gold.c", "file:///lake/gold/c", None),
        ("gold.d", None, "file:///lake/gold/d__v2"),
    ]
    pointed = {**named, "gold.a": LIVE["gold.a"], "gold.c": None, "gold.d": LIVE["gold.d"]}
    assert shadow.misnamed(pointed, LIVE, BESIDE) == []


def test_each_name_that_disagrees_is_a_line_under_the_command_that_finishes_the_swap() -> None:
    swapped = versions.swap(versions.start(Versions(), "silver"))
    found = shadow.misnamed({"gold.a": "file:///lake/gold/a", "gold.c": None}, LIVE, BESIDE)
    assert shadow.misnamed_lines(found, shadow.finishing(swapped)) == [
        "names: 1 disagree with the lake's versions, until `lakehouse shadow swap`:",
        "  gold.a points at file:///lake/gold/a; the versions say file:///lake/gold/a__v2",
    ]
    assert shadow.finishing(versions.swap(swapped, back=True)).endswith("swap --back`")
    assert shadow.misnamed_lines([], "") == ["names: each as the lake's versions say"]
