"""The report's page of one explained session (`lakehouse explain`): its path from Kafka
through bronze and silver to gold, readable without knowing the lake.

One page per session under `<site>/explain/`, and an index of them there, which the tables
page links to. Plain HTML, like the tables page: no script, no stylesheet to fetch.
"""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from lakehouse.core.console import moment, record_at

LINEAGE = ("topic", "partition", "offset")
FOLDER = "explain"
INDEX = f"{FOLDER}/index.html"
_STYLE = (
    "body{font-family:sans-serif;margin:2em;max-width:75em}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}"
    ".bad{color:#b91c1c}.good{color:#15803d}code{background:#f3f4f6}"
    ".path{display:flex;gap:.5em;align-items:stretch;margin:1em 0}"
    ".step{border:1px solid #94a3b8;border-radius:6px;padding:.5em 1em;min-width:12em}"
    ".arrow{align-self:center;font-size:1.5em}"
)


def write_explain_page(site: Path, explained: Mapping[str, Any]) -> Path:
    """Write the session's page (`explained`: `Explanation.to_dict()`) and the index of
    explained sessions; the page's path."""
    folder = site / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    page = folder / page_name(explained["sensor"], explained["session"])
    title = f"{explained['sensor']}/{explained['session']}"
    page.write_text(_document(title, _body(explained), up="index.html"))
    write_explain_index(site)
    return page


def write_explain_index(site: Path) -> Path:
    """The index of every session explained so far (none yet: an empty list)."""
    folder = site / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    pages = sorted(p for p in folder.glob("*.html") if p.name != "index.html")
    items = "".join(
        f"<li><a href='{html.escape(p.name)}'>{html.escape(_title_of(p))}</a></li>" for p in pages
    )
    index = folder / "index.html"
    index.write_text(
        _document(
            "Explained sessions",
            "<h1>Explained sessions</h1><p>Each page follows one session from Kafka to gold, "
            f"as <code>lakehouse explain</code> found it.</p><ul>{items or '<li>none yet</li>'}"
            "</ul>",
            up="../tables.html",
        )
    )
    return index


def page_name(sensor: str, session: str) -> str:
    """A file name for the session's page: its sensor and id, safe on any file system, and
    a digest of the two as given, so that ids alike once made safe never share a page."""
    digest = hashlib.sha256(f"{sensor}/{session}".encode()).hexdigest()[:8]
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{sensor}__{session}") + f"-{digest}.html"


def _title_of(page: Path) -> str:
    found = re.search(r"<title>(.*?)</title>", page.read_text())
    return html.unescape(found[1]) if found else page.stem


def _document(title: str, body: str, up: str) -> str:
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
        f"<p><a href='{up}'>back</a></p>{body}</body></html>"
    )


def _body(e: Mapping[str, Any]) -> str:
    s = e["session_row"] or {}
    kafka_records = sum(k["records"] for k in e["kafka"])
    exactly_once = all(k["exactly_once"] for k in e["kafka"])
    gold_rows = sum(len(g["rows"]) for g in e["gold"])
    steps = [
        ("Kafka", f"{kafka_records:,} records sent by the sensor"),
        (
            "bronze",
            f"{sum(k['in_bronze'] for k in e['kafka']):,} kept, "
            f"{sum(k['in_quarantine'] for k in e['kafka']):,} quarantined: "
            + _verdict(exactly_once, "each exactly once", "NOT exactly once"),
        ),
        (
            "silver",
            f"{s.get('status', 'unknown')}: {e['rows_now']:,} rows now, "
            f"{len(e['violations']):,} violations",
        ),
        ("gold", f"{gold_rows:,} rows in {sum(1 for g in e['gold'] if g['rows'])} tables"),
    ]
    path = "<span class='arrow'>&rarr;</span>".join(
        f"<div class='step'><b>{name}</b><br>{text}</div>" for name, text in steps
    )
    return (
        f"<h1>Session {html.escape(e['session'])} of {html.escape(e['sensor'])}</h1>"
        "<p>Its path through the lake, layer by layer: what the sensor sent, what the lake "
        "took in, how the session was rebuilt, and every gold row it feeds.</p>"
        f"<div class='path'>{path}</div>"
        f"{_kafka(e)}{_silver(e)}{_gold(e)}"
    )


def _kafka(e: Mapping[str, Any]) -> str:
    rows = [
        [
            k["topic"],
            k["partition"],
            f"{k['first_offset']:,} .. {k['last_offset']:,}",
            k["records"],
            f"{_moment(k['first_timestamp'])} .. {_moment(k['last_timestamp'])}",
            "not read" if k["in_kafka"] is None else k["in_kafka"],
            k["in_bronze"],
            k["in_quarantine"],
            _verdict(k["exactly_once"], "yes", "NO")
            + "".join(
                f"<br>{label}: {html.escape(', '.join(map(str, offsets[:20])))}"
                for label, offsets in (("twice", k["held_twice"]), ("missing", k["missing"]))
                if offsets
            )
            + (f"<br>{html.escape(k['kafka_note'])}" if k["kafka_note"] else ""),
        ]
        for k in e["kafka"]
    ]
    return "<h2>Kafka and bronze</h2>" + _table(
        ["topic", "partition", "offsets", "records", "Kafka timestamps", "in the broker",
         "in bronze", "quarantined", "exactly once"],
        rows,
        raw=frozenset({8}),
    )  # fmt: skip


def _session_table(s: Mapping[str, Any]) -> str:
    """The session's row of `silver.sessions`, as a one-row table."""
    cells = {
        "status": s["status"],
        "seq": f"{s['first_seq']} .. {s['last_seq']}",
        **{k: s[k] for k in ("records", "snapshots", "updates", "rejected", "gaps")},
        "event time": f"{_moment(s['first_event_time'])} .. {_moment(s['last_event_time'])}",
    }
    return _table(list(cells), [list(cells.values())])


def _silver(e: Mapping[str, Any]) -> str:
    s = e["session_row"]
    parts = ["<h2>silver</h2>"]
    if s:
        parts.append(_session_table(s))
    if e["transitions"] is None:
        parts.append(
            "<p>State transitions were not recorded: silver ran without <code>--trace</code> "
            "for this session. The row changes and violations say what each record did.</p>"
        )
    else:
        parts.append("<h3>State transitions</h3>")
        parts.append(
            _table(
                ["record", "seq", "action", "before", "after"],
                [
                    [record_at(t), t["seq"], t["action"], t["before"], t["after"]]
                    for t in e["transitions"]
                ],
            )
        )
    ops = ", ".join(f"{op} {n:,}" for op, n in sorted(e["changes_by_op"].items()))
    parts.append(f"<p>Row changes: {html.escape(ops or 'none')}.</p>")
    parts.append(f"<h3>Violations ({len(e['violations'])})</h3>")
    parts.append(
        _table(
            ["record", "reason", "expected seq", "found seq", "detail"],
            [
                [record_at(v), v["reason"], v["expected_seq"], v["found_seq"], v["detail"]]
                for v in e["violations"]
            ],
        )
    )
    parts.append(f"<h3>Rows now ({e['rows_now']:,})</h3>")
    rows = e["rows"]
    if rows is None:
        parts.append("<p>Listed with <code>lakehouse explain --rows</code>.</p>")
    elif rows:
        columns = [c for c in rows[0] if c not in ("sensor_id", "session_id", *LINEAGE)]
        parts.append(
            _table(
                [*columns, "from record"], [[*(r[c] for c in columns), record_at(r)] for r in rows]
            )
        )
    return "".join(parts)


def _gold(e: Mapping[str, Any]) -> str:
    parts = ["<h2>gold</h2>"]
    for g in e["gold"]:
        parts.append(f"<h3>{html.escape(g['model'])} ({len(g['rows']):,} rows)</h3>")
        if g["rows"]:
            columns = list(g["rows"][0])
            parts.append(_table(columns, [[r[c] for c in columns] for r in g["rows"]]))
        for run in g["runs"]:
            if "note" in run:
                parts.append(f"<p>Last written by: unknown ({html.escape(run['note'])}).</p>")
                continue
            parts.append(
                f"<p>Last written by run <code>{html.escape(run['run_id'])}</code> "
                f"({html.escape(run['mode'])}, {_moment(run['started_at'])}); its gate:</p>"
            )
            parts.append(
                _table(
                    ["expectation", "severity", "held", "unexpected"],
                    [
                        [
                            r["expectation"],
                            r["severity"],
                            _verdict(r["success"], "yes", "no"),
                            r["unexpected_count"],
                        ]
                        for r in run["gate"]
                    ],
                    raw=frozenset({2}),
                )
            )
    return "".join(parts)


def _table(
    head: Sequence[str], rows: Iterable[Sequence[Any]], raw: frozenset[int] = frozenset()
) -> str:
    cells = "".join(
        "<tr>"
        + "".join(f"<td>{v if i in raw else html.escape(_text(v))}</td>" for i, v in enumerate(row))
        + "</tr>"
        for row in rows
    )
    header = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return f"<table><tr>{header}</tr>{cells}</table>"


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return _moment(value)
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def _moment(value: datetime | str | None) -> str:
    return moment(value, missing="")


def _verdict(good: bool, yes: str, no: str) -> str:
    return f"<span class='good'>{yes}</span>" if good else f"<span class='bad'>{no}</span>"
