"""What a game day says: one line a step, the load's growth of lag, the report's page."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from lakehouse.gameday.day import Verdict
from lakehouse.gameday.load import LoadRun, Percentiles, resident_bytes, slope, traffic_for
from lakehouse.gameday.reconcile import Tally
from lakehouse.gameday.run import Report, load_line
from lakehouse.ops.producer import generate_traffic
from lakehouse.report.gameday_page import write_gameday_page


def test_a_step_reads_as_one_line_and_a_failure_names_what_was_lost() -> None:
    passed = Verdict("kill silver at after-commit", "PASS", [Tally("kafka ↔ bronze")], 14.25)
    assert (
        passed.line() == "PASS kill silver at after-commit: 0 lost, 0 doubled, recovered in 14.2 s"
    )
    lost = Tally("kafka ↔ bronze", lost=3, examples=("lost ('t', 0, 5)",))
    failed = Verdict("long-stop for 30 s", "FAIL", [lost, Tally("bronze ↔ silver", doubled=1)])
    assert failed.line().splitlines() == [
        "FAIL long-stop for 30 s: 3 lost, 1 doubled",
        "  kafka ↔ bronze: 3 lost, 0 doubled, 0 altered (e.g. lost ('t', 0, 5))",
        "  bronze ↔ silver: 0 lost, 1 doubled, 0 altered",
    ]
    assert Verdict("worker-kill", "SKIP", note="needs a cluster").line() == (
        "SKIP worker-kill: needs a cluster"
    )


def test_a_phase_kept_up_when_the_lag_s_floor_after_each_commit_did_not_rise() -> None:
    assert slope([(0, 0), (2, 40), (4, 80)]) == 20
    assert slope([(1, 5)]) == 0
    # A sawtooth: 100/s arrive while a batch runs, each commit takes the lag back down.
    steady = LoadRun(
        100, 40, lag=[(t, 100 * (t % 10) + (t % 10 == 0) * 37) for t in range(0, 41, 2)]
    )
    assert [lag for _, lag in steady.floors] == [37, 37, 37, 37]
    assert steady.kept_up and steady.lag_growth == 0
    # Each commit leaves 300 more behind than the last: 30/s, over a tenth of the rate.
    behind = LoadRun(100, 40, lag=[(t, 150 * (t % 10) + 30 * t) for t in range(0, 41, 2)])
    assert behind.lag_growth == 30 and not behind.kept_up
    assert load_line(behind) == "100/s: fell behind (lag's floor rose 30 records/s)"
    # Two commits: where a sample fell within a batch outweighs any trend.
    short = LoadRun(1000, 20, lag=[(0, 0), (4, 4000), (8, 8000), (10, 500), (14, 4500), (16, 300)])
    assert (
        short.kept_up is None
        and Report("local", "x", "d", "t", load=[short]).highest_rate_kept_up() is None
    )
    assert load_line(short).startswith("1,000/s: too short to tell whether it kept up (2 of")


@settings(max_examples=9, deadline=None)
@given(rate=st.sampled_from([50, 333, 1000]), seconds=st.sampled_from([5, 12, 20]))
def test_a_load_phase_sends_about_rate_times_seconds_in_the_benchmarks_shape(
    rate: int, seconds: int
) -> None:
    """The load phase and `benchmarks.latency` send this same traffic at a rate: each
    sensor's sessions a 200-row snapshot, then updates; about 1,000 records a session from
    10,000 records on."""
    spec = traffic_for(rate, seconds, seed=3, first_sensor=500, topic_prefix="x.")
    records = list(generate_traffic(spec))
    asked = rate * seconds
    assert abs(len(records) - asked) <= 10 * spec.sessions_per_sensor  # rounding, a sensor each
    assert {r.topic for r in records} == {f"x.sensor-{i:03d}" for i in range(500, 510)}
    assert {r.partition for r in records} <= set(range(4)) and spec.rows_per_snapshot == 200
    if asked >= 10_000:
        assert 750 <= len(records) / (10 * spec.sessions_per_sensor) <= 1_500


def test_the_page_shows_each_verdict_and_the_load_with_its_images(tmp_path: Path) -> None:
    report = Report("local", "default", "day-1", "2026-12-06T08:00:00+00:00", seconds=61)
    report.verdicts = [
        Verdict("baseline", "PASS", [Tally("kafka ↔ bronze")], 3.0, seconds=20),
        Verdict("worker-kill", "SKIP", note="needs a cluster", seconds=0.1),
    ]
    fast = Percentiles(10, 1.5, 2.5, 3.0)
    report.load = [
        LoadRun(100, 30, 3000, [(0, 9), (2, 3), (4, 9), (6, 3), (8, 9), (10, 3)], fast, fast,
                {"bronze": 900.0, "silver": 4100.0},
                {"s.sensor-1/0": 3, "s.sensor-1/1": 41}, 120, 1 << 20, 900 << 20)
    ]  # fmt: skip
    assert report.passed and report.highest_rate_kept_up() == 100
    page = write_gameday_page(tmp_path, report.as_json())
    text = page.read_text()
    assert "Game day day-1: passed" in text and "SKIP worker-kill: needs a cluster" in text
    assert "p50 1.5 s, p95 2.5 s" in text and "bronze 0.9 s, silver 4.1 s" in text
    assert "s.sensor-1/1: 41" in text and "900 MiB" in text and "kept up" in text
    assert (tmp_path / "gameday" / "timeline.png").stat().st_size > 1000
    assert (tmp_path / "gameday" / "lag.png").stat().st_size > 1000


def test_the_resident_memory_of_a_process_group_is_its_processes_and_only_theirs() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "b = bytearray(200 << 20); import time; time.sleep(30)"],
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 10
        while resident_bytes(child.pid) < 200 << 20 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert 200 << 20 <= resident_bytes(child.pid) < 400 << 20
    finally:
        child.kill()
        child.wait()
    assert resident_bytes(child.pid) == 0
