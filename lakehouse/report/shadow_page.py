"""The report's shadow page: the last `lakehouse shadow compare`, table by table, from its
JSON alone."""

from __future__ import annotations

import html
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lakehouse.report.data_docs import link_from_index

PAGE = "shadow.html"


def write_shadow_page(site: Path, comparison: Mapping[str, Any]) -> Path:
    """`shadow.html` in the report site, linked from its index."""
    site.mkdir(parents=True, exist_ok=True)
    page = site / PAGE
    page.write_text(render(comparison))
    link_from_index(site, PAGE, "Shadow compare")
    return page


def render(comparison: Mapping[str, Any]) -> str:
    where = comparison["where"]
    live, other = where["live"], where["shadow"]
    verdict = "equal" if comparison["equal"] else "they differ"
    checks = "".join(
        f"<tr><td>{html.escape(side['tag'])}</td><td>{side['checks_run']:,}</td>"
        f"<td>{sum(side['checks_failed'].values()):,}</td><td>{_by_table(side)}</td></tr>"
        for side in (live, other)
    )
    return (
        "<!doctype html><meta charset='utf-8'><title>Shadow compare</title>"
        "<body style='font-family:sans-serif;max-width:70em;margin:auto'>"
        f"<h1>Live {html.escape(live['tag'])} against {html.escape(other['tag'])}: {verdict}</h1>"
        f"<p>Both read bronze to version {where['bronze_version']}; "
        f"parts: {html.escape(', '.join(where['versions']['parts']))}.</p>"
        "<table border=1 cellpadding=4><tr><th>table</th><th>rows live</th><th>rows shadow</th>"
        "<th>only live</th><th>only shadow</th><th>changed</th><th>columns changed</th></tr>"
        + "".join(_row(t) for t in comparison["tables"])
        + "</table><h2>Checks</h2><table border=1 cellpadding=4><tr><th>version</th>"
        "<th>validations</th><th>failed</th><th>by table</th></tr>"
        + checks
        + "</table>"
        + "".join(_samples(t) for t in comparison["tables"] if not t["equal"])
    )


def _by_table(side: Mapping[str, Any]) -> str:
    return html.escape(", ".join(f"{t} {n}" for t, n in side["checks_failed"].items()))


def _row(table: Mapping[str, Any]) -> str:
    counts, rows = table["counts"], table["rows"]
    columns = ", ".join(f"{c} {n:,}" for c, n in table["columns_changed"].items())
    return (
        f"<tr><td>{html.escape(table['table'])}</td><td>{rows['live']:,}</td>"
        f"<td>{rows['shadow']:,}</td><td>{counts['only_live']:,}</td>"
        f"<td>{counts['only_shadow']:,}</td><td>{counts['changed']:,}</td>"
        f"<td>{html.escape(columns)}</td></tr>"
    )


def _samples(table: Mapping[str, Any]) -> str:
    items = "".join(
        f"<li>{kind}: {html.escape(' '.join(f'{k}={v}' for k, v in row['key'].items()))}"
        + "".join(
            f"; {html.escape(c)}: {html.escape(str(a))} &rarr; {html.escape(str(b))}"
            for c, (a, b) in row["columns"].items()
        )
        + "</li>"
        for kind, rows in table["samples"].items()
        for row in rows
    )
    return f"<h2>{html.escape(table['table'])}</h2><ul>{items}</ul>"
