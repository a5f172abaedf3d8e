"""A batch's moments on a local lake, seen in its folders as a stream writes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakehouse.gameday.faults import LocalMoment, MomentMissed, strike_at


def batch(checkpoint: Path, table: Path, n: int, stage: str) -> None:
    """Write what a stream writes for batch `n` up to `stage`: offsets, delta, commit."""
    for folder in (checkpoint / "offsets", checkpoint / "commits", table / "_delta_log"):
        folder.mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(n)).write_text("{}")
    if stage in ("delta", "commit"):
        (table / "_delta_log" / f"{n + 1:020d}.json").write_text("{}")
    if stage == "commit":
        (checkpoint / "commits" / str(n)).write_text("{}")


@pytest.mark.parametrize(
    ("moment", "reached_at"),
    [("before-writes", "offsets"), ("after-delta-commit", "delta"), ("after-commit", "commit")],
)
def test_each_moment_is_reached_at_its_step_of_the_next_batch_only(
    tmp_path: Path, moment: str, reached_at: str
) -> None:
    checkpoint, table = tmp_path / "checkpoint", tmp_path / "table"
    batch(checkpoint, table, 0, "commit")
    batch(checkpoint, table, 1, "offsets")  # planned before arming: a restart's redo
    armed = LocalMoment(moment, checkpoint, table)
    assert not armed.reached()
    seen = []
    for stage in ("offsets", "delta", "commit"):
        batch(checkpoint, table, 2, stage)
        seen.append(armed.reached())
        if seen[-1]:
            break
    assert seen[-1] and len(seen) == ("offsets", "delta", "commit").index(reached_at) + 1


def test_a_moment_that_never_comes_or_a_job_that_ended_is_missed(tmp_path: Path) -> None:
    armed = LocalMoment("after-commit", tmp_path / "c", tmp_path / "t")
    struck: list[bool] = []
    with pytest.raises(MomentMissed, match="the job ended before after-commit"):
        strike_at(armed, lambda: struck.append(True), 5, alive=lambda: False)
    with pytest.raises(MomentMissed, match="no after-commit within 0 s"):
        strike_at(armed, lambda: struck.append(True), 0.05, alive=lambda: True)
    assert not struck


def test_a_batch_that_went_past_the_moment_unseen_arms_it_again_with_more_traffic(
    tmp_path: Path,
) -> None:
    checkpoint, table = tmp_path / "checkpoint", tmp_path / "table"
    batch(checkpoint, table, 0, "commit")
    armed = LocalMoment("after-delta-commit", checkpoint, table)
    batch(checkpoint, table, 1, "commit")  # its Delta commit and checkpoint commit unseen
    assert armed.passed() and not armed.reached()
    struck: list[int] = []
    strike_at(
        armed,
        lambda: struck.append(max(int(p.name) for p in (checkpoint / "offsets").iterdir())),
        5,
        alive=lambda: True,
        more=lambda: batch(checkpoint, table, 2, "delta"),
    )
    assert struck == [2]  # at batch 2's Delta commit, before its checkpoint's commit
