"""The report's page of plots, from progress rows to a page of PNG files, without Spark."""

from __future__ import annotations

import html
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd

from lakehouse.report.plots_page import (
    NEWEST_COLUMNS,
    USED_COLUMNS,
    freshness,
    plots,
    render_plots_page,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
T0 = datetime(2026, 3, 1, 12, 0, 0)
NOW = datetime(2026, 3, 1, 13, 0, 0)


def batch(node: str, batch_id: int, seconds: float, run_id: str = "r1", **more: Any) -> dict:
    return {
        "run_id": run_id,
        "node": node,
        "kind": "stream",
        "batch_id": batch_id,
        "started_at": T0 + timedelta(seconds=seconds),
        "duration_ms": 2000,
        "input_rows_per_second": 100.0 + batch_id,
        "processed_rows_per_second": 90.0 + batch_id,
        "kafka_offsets_behind": None,
        "quarantined_rows": 0,
        "violations": None,
        **more,
    }


def progress_rows() -> pd.DataFrame:
    rows = [
        batch("bronze", 0, 0, kafka_offsets_behind={"sensors.a/0": 40, "sensors.b/0": 10}),
        batch("bronze", 1, 10, kafka_offsets_behind={"sensors.a/0": 5, "sensors.b/0": 0}),
        batch("bronze", 2, 20, quarantined_rows=3, kafka_offsets_behind=[("sensors.a/0", 0)]),
        batch("silver", 0, 5, violations={"gap_in_sequence": 2}),
        batch("silver", 1, 15, violations={}),
        batch("silver", 2, 600, run_id="r2", quarantined_rows=1, violations={"duplicate": 1}),
        {**batch("gold.sensor_hourly", 0, 30), "kind": "model", "batch_id": None},
        {**batch("check:silver.sessions", 0, 40), "kind": "check", "batch_id": None},
    ]
    return pd.DataFrame(rows, columns=USED_COLUMNS)


def newest_timestamps() -> pd.DataFrame:
    return pd.DataFrame(
        [
            ("bronze", 0, T0 - timedelta(seconds=8)),
            ("bronze", 1, T0 + timedelta(seconds=9)),
            ("silver", 2, T0 + timedelta(seconds=19)),
        ],
        columns=NEWEST_COLUMNS,
    )


def test_the_page_links_one_valid_png_per_plot_with_its_caption(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("<html><body><p>Data Docs</p></body></html>")

    page = render_plots_page(tmp_path, progress_rows(), newest_timestamps(), NOW)

    text = page.read_text()
    sources = re.findall(r"<img src='([^']+)'", text)
    expected = plots(progress_rows(), newest_timestamps())
    assert sources == [f"plots/{p.file}" for p in expected]
    for plot, source in zip(expected, sources, strict=True):
        image = (tmp_path / source).read_bytes()
        assert image.startswith(PNG_SIGNATURE) and len(image) > 5_000, source
        assert html.escape(plot.caption) in text
    assert "href='plots.html'" in (tmp_path / "index.html").read_text()


def test_every_plot_has_points_from_the_rows_that_carry_its_measure() -> None:
    found = {p.file: p.points for p in plots(progress_rows(), newest_timestamps())}

    assert set(found["rates.png"]["line"]) == {
        "bronze input",
        "bronze processed",
        "silver input",
        "silver processed",
    }
    assert found["kafka_lag.png"]["value"].tolist() == [50, 5, 0]
    assert found["batch_duration.png"]["value"].tolist() == [2.0] * 6
    quarantined = found["quarantined_rows.png"].groupby("line")["value"].last()
    assert quarantined.to_dict() == {"bronze": 3, "silver": 1}  # gold's and the check's: 0
    violations = found["violations.png"].groupby("line")["value"].last()
    assert violations.to_dict() == {"gap_in_sequence": 2, "duplicate": 1}


def test_freshness_is_a_batch_end_minus_the_newest_kafka_timestamp_it_wrote() -> None:
    ages = freshness(progress_rows(), newest_timestamps())

    assert list(zip(ages["line"], ages["value"], strict=True)) == [
        ("bronze", 10.0),  # ended at +2 s, newest record from -8 s
        ("bronze", 3.0),  # ended at +12 s, newest from +9 s
        ("silver", 583.0),  # ended at +602 s, newest from +19 s
    ]


def test_freshness_takes_the_latest_batch_of_an_id_a_new_checkpoint_numbered_again() -> None:
    rows = pd.DataFrame(
        [batch("bronze", 0, 0), batch("bronze", 0, 100, run_id="after-full-refresh")],
        columns=USED_COLUMNS,
    )
    newest = pd.DataFrame([("bronze", 0, T0 + timedelta(seconds=90))], columns=NEWEST_COLUMNS)

    ages = freshness(rows, newest)

    assert ages["value"].tolist() == [12.0]


def test_lines_break_between_runs_and_running_totals_do_not() -> None:
    found = {p.file: p.points for p in plots(progress_rows(), newest_timestamps())}

    silver = found["batch_duration.png"].query("line == 'silver'")
    assert silver["segment"].nunique() == 2
    assert found["violations.png"].groupby("line")["segment"].nunique().max() == 1


def test_without_progress_the_page_says_so_and_draws_nothing(tmp_path: Path) -> None:
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "rates.png").write_bytes(PNG_SIGNATURE)  # from an earlier report

    page = render_plots_page(
        tmp_path,
        pd.DataFrame(columns=USED_COLUMNS),
        pd.DataFrame(columns=NEWEST_COLUMNS),
        NOW,
    )

    assert "No progress recorded yet" in page.read_text()
    assert "<img" not in page.read_text()
    assert list((tmp_path / "plots").iterdir()) == []


def test_a_plot_without_points_is_still_drawn(tmp_path: Path) -> None:
    only_bronze = progress_rows().query("node == 'bronze'")

    render_plots_page(tmp_path, only_bronze, pd.DataFrame(columns=NEWEST_COLUMNS), NOW)

    assert (tmp_path / "plots" / "violations.png").read_bytes().startswith(PNG_SIGNATURE)
    assert (tmp_path / "plots" / "freshness.png").read_bytes().startswith(PNG_SIGNATURE)
