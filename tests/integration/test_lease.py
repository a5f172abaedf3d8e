"""The lease that keeps one writer per table on S3, against a real S3 server, raced by
real processes."""

from __future__ import annotations

import multiprocessing
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from lakehouse.core.errors import LakehouseError
from lakehouse.services.s3 import EmbeddedS3
from lakehouse.storage.lease import LeaseRefused, TableLease, holding, writer_name
from tests.support import S3_KEYS, settings_for

pytestmark = pytest.mark.integration

ROUNDS = 40


def lease(server: EmbeddedS3, table: str, holder: str, ttl_s: float = 30) -> TableLease:
    endpoint = server.address()
    assert endpoint is not None
    return TableLease(server.client(endpoint), "lake", "lakehouse", table, holder, ttl_s)


def race(home: str, holder: str, start: Any, results: Any) -> None:
    """One contender: for each round, wait for the other, then try to take that round's
    lease at the same moment."""
    server = EmbeddedS3(Path(home), *S3_KEYS)
    for round_ in range(ROUNDS):
        start.wait()
        try:
            lease(server, f"race.table_{round_}", holder).acquire()
            results.put((round_, holder))
        except LeaseRefused:
            pass


def test_of_two_processes_racing_for_a_lease_exactly_one_wins_every_time(
    s3: EmbeddedS3,
) -> None:
    context = multiprocessing.get_context("spawn")
    start, results = context.Barrier(2), context.Queue()
    racers = [
        context.Process(target=race, args=(str(s3.home), name, start, results))
        for name in ("writer-a", "writer-b")
    ]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(300)
        assert racer.exitcode == 0

    winners: dict[int, list[str]] = {}
    while not results.empty():
        round_, holder = results.get()
        winners.setdefault(round_, []).append(holder)

    assert sorted(winners) == list(range(ROUNDS))
    assert all(len(holders) == 1 for holders in winners.values()), winners
    for round_, (holder,) in winners.items():
        current = lease(s3, f"race.table_{round_}", "reader").current()
        assert current is not None and current.holder == holder


def test_a_second_writer_is_refused_in_one_line_naming_the_holder(s3: EmbeddedS3) -> None:
    lease(s3, "silver.sessions", "silver-stream@host:1").acquire()

    with pytest.raises(LeaseRefused) as refused:
        lease(s3, "silver.sessions", "compaction@host:2").acquire()

    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("silver.sessions is leased to silver-stream@host:1 (generation 1")


def test_a_holder_keeps_its_lease_by_renewing_and_loses_it_once_taken(s3: EmbeddedS3) -> None:
    holder = lease(s3, "gold.sensor_hourly", "gold@host:1", ttl_s=0.5)
    holder.acquire()
    holder.renew()
    time.sleep(0.6)  # the holder stalled past its lease: another writer may take it
    lease(s3, "gold.sensor_hourly", "gold@host:2").acquire()

    with pytest.raises(LeaseRefused, match="gold@host:2"):
        holder.renew()


def test_a_crashed_holders_lease_frees_when_it_expires(s3: EmbeddedS3) -> None:
    context = multiprocessing.get_context("spawn")
    crashed = context.Process(target=take_and_die, args=(str(s3.home),))
    crashed.start()
    crashed.join(60)
    assert crashed.exitcode == -signal.SIGKILL  # killed holding the lease, never released

    with pytest.raises(LeaseRefused, match="crashed@host"):
        lease(s3, "bronze.sensor_records", "next@host").acquire()
    time.sleep(2.1)
    assert lease(s3, "bronze.sensor_records", "next@host").acquire().holder == "next@host"


def take_and_die(home: str) -> None:
    import os
    import signal

    server = EmbeddedS3(Path(home), *S3_KEYS)
    lease(server, "bronze.sensor_records", "crashed@host", ttl_s=2).acquire()
    os.kill(os.getpid(), signal.SIGKILL)


def test_releasing_frees_the_lease_at_once(s3: EmbeddedS3) -> None:
    first = lease(s3, "silver.violations", "first@host")
    first.acquire()
    first.release()

    assert lease(s3, "silver.violations", "second@host").acquire().holder == "second@host"


def test_taking_a_lease_from_a_server_that_does_not_answer_is_one_line(tmp_path: Path) -> None:
    s = settings_for(tmp_path, "127.0.0.1:9", "x.", storage__root="s3a://lake/t",
                     s3__endpoint="http://127.0.0.1:9", s3__access_key=S3_KEYS[0],
                     s3__secret_key=S3_KEYS[1])  # fmt: skip

    with pytest.raises(LakehouseError) as refused, holding(s, ["silver.sessions"], "silver"):
        pass

    assert str(refused.value).startswith(
        "cannot take the lease of silver.sessions: object storage at 127.0.0.1:9 did not answer"
    )


def test_a_writer_restarted_in_its_process_takes_back_the_lease_it_could_not_release(
    s3: EmbeddedS3, tmp_path: Path
) -> None:
    """A part of `run all` failed while S3 was down and could not release its lease: its
    restart in the same process takes it back at once, another process still waits, and
    a second block of the same process while the first holds it is refused."""
    endpoint = s3.address()
    assert endpoint is not None
    s = settings_for(tmp_path, "127.0.0.1:9", "x.", storage__root="s3a://lake/takeback",
                     s3__endpoint=endpoint, s3__access_key=S3_KEYS[0],
                     s3__secret_key=S3_KEYS[1])  # fmt: skip

    def lease_as(holder: str) -> TableLease:
        return TableLease(s3.client(endpoint), "lake", "takeback", "silver.sessions", holder, 60)

    lease_as(writer_name("the silver stream")).acquire()  # and never released

    with pytest.raises(LeaseRefused, match="leased to the silver stream@"):
        lease_as("the silver stream@elsewhere:1/abc").acquire()
    with holding(s, ["silver.sessions"], "the silver stream") as held:
        assert held.leases[0].held is not None
        assert held.leases[0].held.generation == 2
        with (
            pytest.raises(LeaseRefused, match="leased to a writer in this process"),
            holding(s, ["silver.sessions"], "the silver stream"),
        ):
            pass
