"""`delta.side_by_side`, the threads a batch's independent table writes run on."""

from __future__ import annotations

import threading

import pytest

from lakehouse.storage.delta import side_by_side


def test_side_by_side_gives_results_in_order_and_runs_calls_at_once() -> None:
    both_started = threading.Barrier(2, timeout=5)  # breaks unless the two run at once

    def call(n: int) -> int:
        both_started.wait()
        return n

    assert side_by_side([lambda: call(1), lambda: call(2)]) == [1, 2]
    assert side_by_side([]) == []


def test_side_by_side_raises_the_first_failure_after_every_call_has_ended() -> None:
    ended: list[str] = []

    def fails(name: str) -> None:
        ended.append(name)
        raise ValueError(name)

    with pytest.raises(ValueError, match="first"):
        side_by_side([lambda: fails("first"), lambda: fails("second"), lambda: ended.append("ok")])
    assert sorted(ended) == ["first", "ok", "second"]
