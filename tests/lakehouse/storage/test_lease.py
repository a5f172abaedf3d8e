"""The lock files that stand for leases on a local lake: writers share them, a command that
rewrites a stream's checkpoint needs them alone. Real locks on real files; S3's leases are
tested against a real S3 server in tests/integration/test_lease.py. And a writer's fence,
on a clock that moves when told: no write begun without half its lease left."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import BotoCoreError, ClientError, ReadTimeoutError

from bronze import sensor_records
from lakehouse.core.errors import Unavailable
from lakehouse.storage.lease import Held, LeaseRefused, TableLease, holding
from tests.support import settings_for


def test_writers_share_a_local_table_and_a_command_needing_it_alone_waits_for_them(
    tmp_path: Path,
) -> None:
    settings = settings_for(tmp_path, "127.0.0.1:9", "x.")
    table = ["silver.sessions"]

    with (
        holding(settings, table, "the silver stream"),
        holding(settings, table, "compact"),
        pytest.raises(LeaseRefused) as refused,
        holding(settings, table, "x", exclusive=True),
    ):
        pass
    assert str(refused.value) == (
        "silver.sessions is in use: x needs it alone, and a writer of it runs (the bronze or "
        "silver stream, `run all`, compaction); stop it first"
    )
    with (
        holding(settings, table, "x", exclusive=True),
        pytest.raises(LeaseRefused, match="held by a command that needs it alone"),
        holding(settings, table, "the silver stream"),
    ):
        pass
    with holding(settings, table, "the silver stream"):
        pass  # free again once the command ended


def test_accepting_a_kafka_change_on_a_local_lake_is_refused_while_bronze_runs(
    tmp_path: Path,
) -> None:
    """Refused before it reads bronze's checkpoint, let alone rewrites it (no Spark here)."""
    settings = settings_for(tmp_path, "127.0.0.1:9", "x.")

    with (
        holding(settings, sensor_records.WRITES, "the bronze stream"),
        pytest.raises(LeaseRefused, match=r"^bronze\.sensor_records is in use: accept "),
    ):
        sensor_records.accept_kafka_change(None, settings, "offsets_lost", "x.sensor-001", 0)  # type: ignore[arg-type]


class Clock:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeS3:
    """What a lease asks of S3 (create if absent, list, read, delete), each PUT taking
    `put_s` on the clock; `lands_then_times_out`: the next PUT is written but its answer
    lost, so that boto3's retry of it finds the key taken."""

    def __init__(self, clock: Clock) -> None:
        self.clock, self.objects = clock, dict[str, bytes]()
        self.put_s, self.lands_then_times_out, self.down = 0.0, False, False

    def put_object(self, Bucket: str, Key: str, Body: bytes, IfNoneMatch: str) -> None:
        self.clock.now += self.put_s
        if self.down:
            raise ReadTimeoutError(endpoint_url="http://s3")
        if self.lands_then_times_out:
            self.lands_then_times_out = False
            self.objects.setdefault(Key, Body)
        if Key in self.objects:
            raise ClientError({"Error": {"Code": "PreconditionFailed"}}, "PutObject")
        self.objects[Key] = Body

    def get_paginator(self, _operation: str) -> FakeS3:
        return self

    def paginate(self, Bucket: str, Prefix: str) -> list[dict[str, Any]]:
        return [{"Contents": [{"Key": k} for k in self.objects if k.startswith(Prefix)]}]

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        return {"Body": io.BytesIO(self.objects[Key])}

    def delete_object(self, Bucket: str, Key: str) -> None:
        self.objects.pop(Key, None)


def taken(clock: Clock, ttl_s: float = 60) -> tuple[TableLease, FakeS3]:
    """The lease of silver.sessions, taken at the clock's time."""
    s3 = FakeS3(clock)
    lease = TableLease(s3, "lake", "lakehouse", "silver.sessions", "silver@host:1", ttl_s, clock)
    lease.acquire()
    return lease, s3


def test_a_writer_refuses_to_write_once_less_than_half_its_lease_is_left() -> None:
    clock = Clock()
    lease, _ = taken(clock)
    held = Held([lease])

    clock.now = 29.0
    held.check()
    clock.now = 31.0
    with pytest.raises(Unavailable) as refused:
        held.check()

    assert str(refused.value).startswith(
        "the lease of silver.sessions was last renewed 31 s ago and ends in 29 s, under the "
        "30 s a batch is given to commit: stopped before writing"
    )
    assert "\n" not in str(refused.value)


def test_a_lease_lasts_from_when_its_last_successful_renewal_was_sent() -> None:
    """Not from its answer (S3 may have written it any time after it was sent), and a
    renewal that failed extends nothing."""
    clock = Clock()
    lease, s3 = taken(clock)
    held = Held([lease])

    clock.now, s3.put_s = 20.0, 25.0
    lease.renew()  # sent at 20 s, answered at 45 s: the lease ends at 80 s
    s3.put_s, s3.down = 0.0, True
    with pytest.raises(BotoCoreError):
        lease.renew()

    clock.now = 49.0
    held.check()
    clock.now = 51.0
    with pytest.raises(Unavailable, match="last renewed 31 s ago and ends in 29 s"):
        held.check()


def test_a_renewal_whose_retry_finds_its_own_first_attempt_written_keeps_the_lease() -> None:
    clock = Clock()
    lease, s3 = taken(clock)

    clock.now, s3.lands_then_times_out = 20.0, True
    grant = lease.renew()

    assert grant.generation == 2 and lease.held == grant
    assert lease.left_s() == 60.0


def test_a_writer_near_its_leases_end_waits_for_the_renewal_under_way() -> None:
    clock = Clock()
    lease, _ = taken(clock)
    held = Held([lease])
    held.renewing = True
    clock.now = 40.0  # 20 s left, under the margin

    def renewal_comes_back() -> None:
        with held.renewed:  # before the check, or while it waits: either way it returns
            lease.renew()
            held.renewed.notify_all()

    renewer = threading.Thread(target=renewal_comes_back)
    renewer.start()
    held.check()
    renewer.join()

    assert lease.left_s() == 60.0
