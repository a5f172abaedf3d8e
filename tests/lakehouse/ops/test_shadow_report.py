"""What `lakehouse shadow status` and `compare` print and the report's page shows, from a
comparison made by hand: the same facts in each."""

from __future__ import annotations

from lakehouse.cli.shadow_text import comparison_lines, where_lines
from lakehouse.core import versions
from lakehouse.core.versions import Versions
from lakehouse.ops.shadow import Side, Where
from lakehouse.ops.shadow_compare import Comparison, TableDiff
from lakehouse.report.shadow_page import render

SHADOW = versions.start(Versions(), "silver")
GOLD = {"gold.session_summary": 0}
KEY = {"sensor_id": "s-3", "session_id": "a"}


def comparison(live_read: int = 42, shadow_gold: int = 0) -> Comparison:
    live = Side("v1", live_read, False, GOLD, {}, 12)
    other = Side("v2", 42, False, {"gold.session_summary": shadow_gold}, {"silver.sessions": 1}, 12)
    where = Where(SHADOW, live, other, 41, 0, 0.0)
    sessions = TableDiff(
        "silver.sessions",
        ("sensor_id", "session_id"),
        {"live": 3, "shadow": 3},
        {"only_live": 0, "only_shadow": 0, "changed": 1},
        {"status": 1},
        {
            "only_live": [],
            "only_shadow": [],
            "changed": [
                {
                    "key": {"sensor_id": "s-3", "session_id": "a"},
                    "columns": {"status": ["open", "expired"]},
                }
            ],
        },
    )
    none = dict.fromkeys(("only_live", "only_shadow", "changed"), 0)
    equal = TableDiff(
        "gold.sensor_hourly", ("sensor_id", "hour"), {"live": 2, "shadow": 2}, none, {}, {}
    )
    return Comparison(where, [sessions, equal])


def test_the_console_and_the_page_name_each_difference_and_the_checks_side_by_side() -> None:
    found = comparison()
    lines = "\n".join(comparison_lines(found))

    assert not found.equal
    assert "live v1 against v2, both at bronze version 41:" in lines
    assert (
        "silver.sessions: 3 rows in v1, 3 in v2: 0 only in v1, 0 only in v2, 1 changed (status 1)"
        in lines
    )
    assert "changed: sensor_id=s-3 session_id=a; status: open -> expired" in lines
    assert "gold.sensor_hourly: 2 rows in v1, 2 in v2: equal" in lines
    assert "checks v2: 1 of 12 validations failed (silver.sessions 1)" in lines
    assert lines.endswith("they differ: 1 of 2 tables differ")
    page = render(found.as_json())
    assert "Live v1 against v2: they differ" in page and "open &rarr; expired" in page


def test_status_says_why_two_versions_are_not_on_the_same_input() -> None:
    assert comparison().where.same_input is None
    behind = "\n".join(where_lines(comparison(live_read=40).where))
    assert "silver: bronze read to version 39 live, 41 in v2" in behind
    assert "same input on both: no: silver has read bronze to version 39 live and 41" in behind
    never = comparison(shadow_gold=-1).where.same_input
    assert never == "gold has not read all of its inputs: gold.session_summary (shadow) never ran"
