"""The report's page of tables: the pipeline's graph, and every table with its grain, its
documented columns, its suite and its latest results, from the manifest.

Plain HTML with an inline SVG: no script and no stylesheet to fetch, so it renders
wherever the Data Docs are opened or published. The Data Docs index links to it.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lakehouse.report.data_docs import link_from_index
from lakehouse.report.explain_page import INDEX as EXPLAINED
from lakehouse.report.explain_page import write_explain_index

PAGE = "tables.html"
_BOX_W, _BOX_H, _GAP_X, _GAP_Y = 210, 30, 60, 14
_COLOURS = {"stream": "#dbeafe", "model": "#dcfce7", "check": "#fef9c3"}


def write_tables_page(
    site: Path, manifest: Mapping[str, Any], latest: Mapping[str, Sequence[Mapping[str, Any]]]
) -> Path:
    """Write the page into the Data Docs `site` and link it from the index; its path.
    `latest`: per table, its latest check's results (expectation, severity, success,
    unexpected_count)."""
    nodes = manifest["nodes"]
    sections = [_table_section(name, table, latest.get(name, ())) for name, table in
                manifest["tables"].items()]  # fmt: skip
    body = (
        "<h1>Tables of the lakehouse</h1>"
        "<p>The pipeline as <code>lakehouse build</code> runs it: each node after the ones "
        "it depends on (streams blue, models green, checks yellow). Then every table: its "
        "grain, columns, suite, and what its latest check found.</p>"
        f"<p><a href='{EXPLAINED}'>Explained sessions</a>: one session each, followed from "
        "Kafka to gold (<code>lakehouse explain</code>).</p>"
        f"{graph_svg(nodes)}{''.join(sections)}"
    )
    write_explain_index(site)
    page = site / PAGE
    page.write_text(
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>Tables</title><style>"
        "body{font-family:sans-serif;margin:2em;max-width:70em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}"
        ".fail{color:#b91c1c}.pass{color:#15803d}code{background:#f3f4f6}"
        f"</style></head><body><p><a href='index.html'>Data Docs</a></p>{body}</body></html>"
    )
    link_from_index(site, PAGE, "Tables, columns and the pipeline graph")
    return page


def graph_svg(nodes: Mapping[str, Mapping[str, Any]]) -> str:
    """The graph drawn in columns by depth (a node one column right of its deepest
    parent), edges as lines from parent to child."""
    depth: dict[str, int] = {}
    for name in nodes:  # the manifest lists nodes in dependency order
        depth[name] = 1 + max((depth[p] for p in nodes[name]["depends_on"]), default=-1)
    rows: dict[int, int] = {}
    place: dict[str, tuple[int, int]] = {}
    for name in nodes:
        column = depth[name]
        place[name] = (column * (_BOX_W + _GAP_X), rows.get(column, 0) * (_BOX_H + _GAP_Y))
        rows[column] = rows.get(column, 0) + 1
    width = (max(depth.values(), default=0) + 1) * (_BOX_W + _GAP_X)
    height = max(rows.values(), default=1) * (_BOX_H + _GAP_Y)
    edges = [
        f"<line x1='{place[p][0] + _BOX_W}' y1='{place[p][1] + _BOX_H / 2}' "
        f"x2='{place[n][0]}' y2='{place[n][1] + _BOX_H / 2}' stroke='#9ca3af'/>"
        for n, node in nodes.items()
        for p in node["depends_on"]
    ]
    boxes = [
        f"<g><title>{html.escape(node['description'])}</title>"
        f"<rect x='{x}' y='{y}' width='{_BOX_W}' height='{_BOX_H}' rx='4' "
        f"fill='{_COLOURS.get(node['kind'], '#eee')}' stroke='#6b7280'/>"
        f"<text x='{x + 6}' y='{y + 19}' font-size='12'>{html.escape(name)}</text></g>"
        for name, node in nodes.items()
        for x, y in [place[name]]
    ]
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"role='img' aria-label='pipeline graph'>{''.join(edges)}{''.join(boxes)}</svg>"
    )


def _table_section(
    name: str, table: Mapping[str, Any], results: Sequence[Mapping[str, Any]]
) -> str:
    columns = "".join(
        f"<tr><td><code>{html.escape(c['name'])}</code></td><td>{html.escape(c['type'])}</td>"
        f"<td>{html.escape(c['description'])}</td></tr>"
        for c in table["columns"]
    )
    suite = table.get("suite")
    found = {r["expectation"]: r for r in results}
    if suite:
        expectations = "".join(
            f"<tr><td><code>{html.escape(e['name'])}</code></td><td>{e['severity']}</td>"
            f"<td>{html.escape(e['type'])}</td><td>{_state(found.get(e['name']))}</td></tr>"
            for e in suite["expectations"]
        )
        checked = (
            "<table><tr><th>expectation</th><th>severity</th><th>type</th>"
            f"<th>latest check</th></tr>{expectations}</table>"
        )
    else:
        checked = "<p>No suite.</p>"
    return (
        f"<h2 id='{html.escape(name)}'>{html.escape(name)}</h2>"
        f"<p>{html.escape(table['grain'])}; written by {html.escape(table['writer'])}.</p>"
        "<table><tr><th>column</th><th>type</th><th>description</th></tr>"
        f"{columns}</table><h3>Suite</h3>{checked}"
    )


def _state(result: Mapping[str, Any] | None) -> str:
    if result is None:
        return "not checked yet"
    if result["success"]:
        return "<span class='pass'>passed</span>"
    count = result.get("unexpected_count")
    return f"<span class='fail'>FAILED</span>{f' ({count:,} unexpected)' if count else ''}"
