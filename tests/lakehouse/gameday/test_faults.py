"""A batch's moments on a local lake, seen in its folders as a stream writes them; on an
object store, seen in the requests through the gate game day puts in front of it."""

from __future__ import annotations

import http.client
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import pytest

from lakehouse.gameday.day import store_moment
from lakehouse.gameday.faults import Gate, LocalMoment, Moment, MomentMissed, strike_at


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


@pytest.mark.parametrize(
    ("moment", "requests", "struck_at"),
    [
        ("before-writes", ["PUT /lake/g/_checkpoints/b/offsets/.3.tmp"], 0),
        (
            "after-delta-commit",
            ["PUT /lake/g/_checkpoints/b/offsets/3", "PUT /lake/g/b/_delta_log/4.json",
             "PUT /lake/g/_checkpoints/b/commits/.3.tmp"],
            2,
        ),
        (
            "after-commit",
            ["PUT /lake/g/_checkpoints/b/commits/.3.tmp", "PUT /lake/g/_checkpoints/b/commits/3",
             "DELETE /lake/g/_checkpoints/b/commits/.3.tmp"],
            2,
        ),
    ],
)  # fmt: skip
def test_a_moment_on_the_store_is_the_first_request_of_its_step_in_this_namespace(
    moment: str, requests: list[str], struck_at: int, upstream: str
) -> None:
    """A job's requests through a gate armed with the moment: it holds the moment's one,
    and the same moment of another namespace holds none of them."""
    assert held(upstream, store_moment(moment, "s3a://lake/g/_checkpoints/b"), requests) == (
        [struck_at],
        requests[struck_at],
    )
    assert held(upstream, store_moment(moment, "s3a://lake/o/_checkpoints/b"), requests) == (
        [],
        None,
    )


def held(upstream: str, moment: Moment, requests: list[str]) -> tuple[list[int], str | None]:
    """Which of `requests` (`METHOD /path`) a gate armed with `moment` left unanswered, and
    the request it says it held."""
    gate = Gate(upstream)
    try:
        gate.arm(moment, lambda: None)
        answers = [ask(gate.endpoint, path, method) for method, path in map(str.split, requests)]
        return [n for n, a in enumerate(answers) if a.startswith("unreachable")], gate.struck_at
    finally:
        gate.close()


@pytest.fixture
def upstream() -> Iterator[str]:
    """An HTTP server that answers every request with 200 and its request line."""
    listener = socket.create_server(("127.0.0.1", 0))

    def answer(client: socket.socket) -> None:
        with client, suppress(OSError):
            while data := client.recv(1 << 16):
                line = data.split(b"\r\n")[0]
                client.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(line), line)
                )

    def serve() -> None:
        with suppress(OSError):
            while True:
                threading.Thread(target=answer, args=(listener.accept()[0],), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


def ask(endpoint: str, path: str, method: str = "GET") -> str:
    """One request through the gate: the line the server answered, or why not."""
    try:
        request = urllib.request.Request(f"{endpoint}{path}", method=method)
        with urllib.request.urlopen(request, timeout=2) as reply:
            return reply.read().decode()
    except (OSError, http.client.HTTPException) as error:
        return f"unreachable: {error}"


def test_a_gate_holds_the_moment_s_request_strikes_once_then_forwards_again(upstream: str) -> None:
    gate, struck = Gate(upstream), []
    try:
        assert ask(gate.endpoint, "/lake/a") == "GET /lake/a HTTP/1.1"
        gate.arm(Moment("at b", r"^GET /lake/b"), lambda: struck.append(True))
        assert ask(gate.endpoint, "/lake/a") == "GET /lake/a HTTP/1.1"
        assert ask(gate.endpoint, "/lake/b").startswith("unreachable")  # held, never answered
        assert struck == [True] and gate.struck_at == "GET /lake/b"
        assert ask(gate.endpoint, "/lake/b") == "GET /lake/b HTTP/1.1"  # once only
        assert struck == [True]
    finally:
        gate.close()


def test_a_gate_in_an_outage_answers_nothing_until_it_ends(upstream: str) -> None:
    gate = Gate(upstream)
    try:
        gate.outage(0.5)
        assert ask(gate.endpoint, "/lake/a").startswith("unreachable")
        time.sleep(0.6)
        assert ask(gate.endpoint, "/lake/a") == "GET /lake/a HTTP/1.1"
    finally:
        gate.close()
