"""The report's game day page: each step's verdict on a timeline, and the load phase's
Kafka lag and latencies, drawn to PNG beside a plain HTML page (as the plots page is), from
the report's JSON alone."""

from __future__ import annotations

import html
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from lakehouse.report.data_docs import link_from_index

PAGE = "gameday.html"
COLOURS = {"PASS": "tab:green", "FAIL": "tab:red", "SKIP": "tab:gray"}


def write_gameday_page(site: Path, report: Mapping[str, Any]) -> Path:
    """`gameday.html` (the latest day) and its images in the report site."""
    images = site / "gameday"
    images.mkdir(parents=True, exist_ok=True)
    draw_timeline(report, images / "timeline.png")
    draw_lag(report, images / "lag.png")
    page = site / PAGE
    page.write_text(render(report))
    link_from_index(site, PAGE, "Game day")
    return page


KEPT_UP = {True: "kept up", False: "fell behind", None: "too short to tell"}


def _growth(records_per_s: float | None) -> str:
    return "-" if records_per_s is None else f"{records_per_s:,.0f}/s"


def render(report: Mapping[str, Any]) -> str:
    verdict = "passed" if report["passed"] else "FAILED"
    rows = "".join(
        f"<tr><td>{v['outcome']}</td><td>{html.escape(v['step'])}</td>"
        f"<td><pre>{html.escape(v['line'])}</pre></td><td>{v['seconds']:.0f} s</td></tr>"
        for v in report["verdicts"]
    )
    load = "".join(
        f"<tr><td>{r['rate']:,.0f}/s</td><td>{KEPT_UP[r['kept_up']]}"
        f"</td><td>{_growth(r['lag_growth'])}</td><td>{_p(r['to_silver'])}</td>"
        f"<td>{_p(r['to_gold'])}</td><td>{_batches(r['batch_ms'])}</td>"
        f"<td>{r['state_rows'] if r['state_rows'] is not None else '-'}</td>"
        f"<td>{r['memory_bytes'] >> 20:,} MiB</td><td>{_worst(r['lag_by_partition'])}</td></tr>"
        for r in report["load"]
    )
    return (
        "<!doctype html><meta charset='utf-8'><title>Game day</title>"
        "<body style='font-family:sans-serif;max-width:70em;margin:auto'>"
        f"<h1>Game day {html.escape(report['day_id'])}: {verdict}</h1>"
        f"<p>target {html.escape(report['target'])}, scenario "
        f"{html.escape(report['scenario'])}, {report['seconds']:.0f} s</p>"
        "<img src='gameday/timeline.png' alt='steps'>"
        f"<table border=1 cellpadding=4><tr><th>verdict</th><th>step</th><th>found</th>"
        f"<th>took</th></tr>{rows}</table>"
        "<h2>Load</h2><img src='gameday/lag.png' alt='Kafka lag'>"
        "<table border=1 cellpadding=4><tr><th>rate</th><th></th><th>lag floor rose</th>"
        f"<th>Kafka → silver</th><th>Kafka → gold</th><th>median batch</th>"
        f"<th>silver state rows</th><th>pipeline memory</th><th>most behind</th></tr>"
        f"{load}</table></body>"
    )


def _batches(batch_ms: Mapping[str, float]) -> str:
    return ", ".join(f"{node} {ms / 1000:.1f} s" for node, ms in batch_ms.items()) or "-"


def _worst(lag_by_partition: Mapping[str, int]) -> str:
    """The partition bronze was furthest behind on."""
    if not lag_by_partition:
        return "-"
    partition = max(lag_by_partition, key=lambda k: lag_by_partition[k])
    return f"{html.escape(partition)}: {lag_by_partition[partition]:,}"


def _p(found: Mapping[str, Any] | None) -> str:
    return "-" if not found else f"p50 {found['p50_s']:.1f} s, p95 {found['p95_s']:.1f} s"


def draw_timeline(report: Mapping[str, Any], path: Path) -> None:
    figure = Figure(figsize=(10, 0.4 * len(report["verdicts"]) + 1.2), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    start = 0.0
    for n, v in enumerate(report["verdicts"]):
        axes.barh(n, v["seconds"], left=start, color=COLOURS[v["outcome"]])
        axes.text(start + v["seconds"], n, f" {v['outcome']}", va="center", fontsize="small")
        start += v["seconds"]
    axes.set_yticks(range(len(report["verdicts"])), [v["step"] for v in report["verdicts"]])
    axes.invert_yaxis()
    axes.set_xlabel("seconds since the day began")
    figure.savefig(path, dpi=100)


def draw_lag(report: Mapping[str, Any], path: Path) -> None:
    figure = Figure(figsize=(10, 3.2), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for run in report["load"]:
        if run["lag"]:
            at, lag = zip(*run["lag"], strict=True)
            axes.plot(at, lag, marker=".", label=f"{run['rate']:,.0f} records/s")
    if report["load"]:
        axes.legend()
    axes.set_xlabel("seconds since the rate began")
    axes.set_ylabel("Kafka records not yet in bronze")
    axes.grid(alpha=0.3)
    figure.savefig(path, dpi=100)
