"""One writer per table on object storage: a lease a second writer cannot take.

Delta's default S3 log store is safe only while one application writes a table at a time:
two drivers committing the same version can both succeed, and one commit is lost. So on
S3 every writing application holds the lease of each table it writes.

A table's lease is a sequence of small objects, `<root>/_leases/<table>/<generation>`, each
created only if absent (`If-None-Match: *`, an atomic create on S3). Of two applications
racing for generation n+1, exactly one creates it. The newest generation says who holds
the lease and until when; the holder renews by creating the next generation before that
time. A holder that crashed stops renewing, and once its lease has expired, the next
writer takes the next generation. A holder that finds its next generation taken has lost
the lease and must stop writing.

Expiry compares wall clocks of different hosts: the time to live must exceed their skew.
A writer fences itself: it begins no write once less than `fence_margin_s` is left of a
lease, counted on its own monotonic clock from when its last successful renewal was sent,
so a renewal that S3 leaves unanswered stops it before the lease ends, as a failed one does.
A lease names its process, so a part of `run all` restarted after an outage takes back the
lease it could not release, where any other writer waits for it to expire.

On a local root several writers are safe (Delta's local log store is atomic): each holds a
shared lock of its tables' lock files (`<root>/_leases/<table>.lock`), which the kernel
frees when the process ends however it ends. A command that rewrites a stream's checkpoint
holds them alone (`exclusive`): refused while any writer runs, and refusing writers while
it runs, as a lease does on S3.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

from lakehouse.core.errors import LakehouseError, Unavailable, explain, transient
from lakehouse.core.settings import Settings


class LeaseRefused(LakehouseError):
    """Another writer holds the lease of `table`; the message names it."""

    def __init__(self, message: str, table: str | None = None) -> None:
        super().__init__(message)
        self.table = table


@dataclass(frozen=True)
class Grant:
    """One generation of a table's lease."""

    table: str
    generation: int
    holder: str
    expires: float
    """Seconds since the epoch; the lease is free after it."""

    def describe(self) -> str:
        until = datetime.fromtimestamp(self.expires, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"{self.holder} (generation {self.generation}, until {until})"


def writer_name(application: str) -> str:
    """Who a lease names: the application, host and process, and a token of the process
    (a pid is used again by a later process)."""
    return f"{application}@{socket.gethostname()}:{os.getpid()}/{_PROCESS_TOKEN}"


_PROCESS_TOKEN = uuid.uuid4().hex[:6]


def fence_margin_s(ttl_s: float) -> float:
    """How much of its lease a writer must have left to begin a batch: half of it.

    It must outlast what a batch that passed the check still does before its last commit
    lands (its jobs and commits, S3A giving up on a hung request), plus the skew between
    this host's clock and the next writer's, which judges the expiry by its own. Half is
    the most a healthy writer never waits on: it renews every third of the lease, and a
    renewal gives up within a sixth (`call_timeout_s`), so its lease keeps half left. Of
    the default 60 s: 30 s for a batch's commits and the clocks' skew."""
    return ttl_s / 2


def call_timeout_s(ttl_s: float) -> float:
    """The lease client's connect and read timeouts: two attempts of both give up within a
    sixth of the lease, so that a renewal S3 leaves unanswered fails, and stops the writer,
    long before the lease ends (boto3's own, 60 s each, outlast it). Never under a second,
    which a busy server's answer may take (the tests' leases last seconds)."""
    return max(ttl_s / 24, 1.0)


def s3a_timeout_s(ttl_s: float) -> float:
    """S3A's connect and socket timeouts where the lake is on S3: a Delta commit that S3
    leaves unanswered is given up within this, not S3A's 200 s, well inside the
    `fence_margin_s` its batch began with. S3A raises any timeout under 15 s to 15 s."""
    return max(ttl_s / 12, 15.0)


_HERE = threading.Lock()
_HELD_HERE: set[str] = set()
"""Tables this process holds in a `holding` block now: a second block in it is refused, as
another writer's would be, though the lease names the same process."""


class TableLease:
    """The lease of one table, held by `holder`, in `bucket` under `prefix`."""

    def __init__(
        self,
        client: Any,
        bucket: str,
        prefix: str,
        table: str,
        holder: str,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client, self.bucket, self.table = client, bucket, table
        self.folder = f"{prefix}/_leases/{table}/".lstrip("/")
        self.holder, self.ttl_s, self.clock = holder, ttl_s, clock
        self.held: Grant | None = None
        self.ends = -math.inf
        """When the lease held ends on `clock`: the lease's time after the moment the
        generation held was sent, which S3 may have written any time after."""

    def left_s(self) -> float:
        """Seconds left of the lease held (0 or less: none)."""
        return self.ends - self.clock()

    def current(self) -> Grant | None:
        """The newest generation, or None if no writer ever took the lease."""
        keys = [
            item["Key"]
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.folder
            )
            for item in page.get("Contents", [])
        ]
        if not keys:
            return None
        body = self.client.get_object(Bucket=self.bucket, Key=max(keys))["Body"].read()
        return Grant(self.table, **json.loads(body))

    def acquire(self) -> Grant:
        """Take the lease, or raise LeaseRefused naming the writer that holds it."""
        current = self.current()
        if current and current.holder != self.holder and current.expires > time.time():
            raise LeaseRefused(
                f"{self.table} is leased to {current.describe()}: one writer per table on "
                "object storage; stop that writer or wait for its lease to expire",
                self.table,
            )
        return self._take(current.generation + 1 if current else 1)

    def renew(self) -> Grant:
        """Extend the lease; LeaseRefused if another writer took it in the meantime."""
        assert self.held is not None, "renew() before acquire()"
        return self._take(self.held.generation + 1)

    def release(self) -> None:
        """Give the lease up at once: a generation that has already expired."""
        if self.held is not None:
            self._create(Grant(self.table, self.held.generation + 1, self.holder, 0.0))
            self.held, self.ends = None, -math.inf

    def _take(self, generation: int) -> Grant:
        sent = self.clock()
        grant = Grant(self.table, generation, self.holder, time.time() + self.ttl_s)
        # A retry of a request that S3 did write, though its answer timed out, finds the
        # generation taken by this very grant: held, not lost.
        if not self._create(grant) and (winner := self.current()) != grant:
            self.held = None
            raise LeaseRefused(
                f"{self.table} is leased to {winner.describe() if winner else 'another writer'}"
                ": it took the lease first; one writer per table on object storage",
                self.table,
            )
        self.held, self.ends = grant, sent + self.ttl_s
        self._forget_before(generation - 1)
        return grant

    def _create(self, grant: Grant) -> bool:
        """Create the generation's object unless it exists; whether this call created it."""
        from botocore.exceptions import ClientError

        body = json.dumps(
            {"generation": grant.generation, "holder": grant.holder, "expires": grant.expires}
        )
        try:
            self.client.put_object(
                Bucket=self.bucket,
                Key=f"{self.folder}{grant.generation:020d}",
                Body=body.encode(),
                IfNoneMatch="*",
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("PreconditionFailed", "412"):
                return False
            raise
        return True

    def _forget_before(self, generation: int) -> None:
        """Old generations say nothing the newest does not: delete them."""
        for old in range(max(1, generation - 3), generation):
            self.client.delete_object(Bucket=self.bucket, Key=f"{self.folder}{old:020d}")


class Held:
    """The leases a writer holds while it writes; `check()` raises once one is lost, or
    about to end."""

    def __init__(self, leases: Sequence[TableLease] = ()) -> None:
        self.leases = list(leases)
        self.lost: LakehouseError | None = None
        self.renewing = False
        """A renewer runs: a lease near its end may yet be renewed."""
        self.renewed = threading.Condition()
        """Notified by the renewer after each renewal, or its failure."""

    def check(self) -> None:
        """Call before each write: a writer that lost a lease, or has less than
        `fence_margin_s` left of one, must not write again. A renewal under way is waited
        for while the lease lasts: it may yet come back (a busy server)."""
        with self.renewed:
            while self.lost is None:
                lease = min(self.leases, key=lambda each: each.ends, default=None)
                if lease is None or (left := lease.left_s()) >= fence_margin_s(lease.ttl_s):
                    return
                if not (self.renewing and left > 0):
                    raise Unavailable(_lapsing(lease, left))
                self.renewed.wait(left)  # then looked at again: renewed, lost or ended
            raise self.lost


def _lapsing(lease: TableLease, left: float) -> str:
    return (
        f"the lease of {lease.table} was last renewed {lease.ttl_s - left:.0f} s ago and "
        f"{'has ended' if left <= 0 else f'ends in {left:.0f} s'}, under the "
        f"{fence_margin_s(lease.ttl_s):.0f} s a batch is given to commit: stopped before "
        "writing, as object storage has not answered its renewal; run again, the writer "
        "takes the lease back unless another writer took it"
    )


@contextmanager
def holding(
    settings: Settings, tables: Sequence[str], application: str, exclusive: bool = False
) -> Iterator[Held]:
    """Hold the leases of `tables` while the block runs, renewed in the background, and
    release them after it. On a local root, their lock files: shared with other writers,
    or `exclusive` of every one (a command that rewrites a stream's checkpoint). Each
    version of a table (`lakehouse shadow`) has a lease of its own."""
    tables = [settings.storage.versioned(table) for table in tables]
    if not settings.storage.root.startswith("s3a://"):
        with _locked(settings.storage.root, tables, application, exclusive):
            yield Held()
        return
    with _HERE:  # the parts of `run all` take their leases from threads side by side
        if taken := [t for t in tables if t in _HELD_HERE]:
            raise LeaseRefused(
                f"{taken[0]} is leased to a writer in this process: one writer per table "
                "on object storage",
                taken[0],
            )
        _HELD_HERE.update(tables)
    try:
        with _leased(settings, tables, application) as held:
            yield held
    finally:
        with _HERE:
            _HELD_HERE.difference_update(tables)


@contextmanager
def _leased(settings: Settings, tables: Sequence[str], application: str) -> Iterator[Held]:
    """The leases of `tables` on S3, renewed in the background, released after."""
    from lakehouse.services import s3
    from lakehouse.storage.buckets import bucket_and_prefix

    bucket, prefix = bucket_and_prefix(settings.storage.root)
    ttl = settings.storage.lease_seconds
    client = s3.client(settings, call_timeout_s(ttl))
    holder = writer_name(application)
    held = Held()
    renewer: threading.Thread | None = None
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        for table in tables:
            lease = TableLease(client, bucket, prefix, table, holder, ttl)
            try:
                lease.acquire()
            except (BotoCoreError, ClientError) as error:  # S3 down, or refusing the keys
                kind = Unavailable if transient(error) else LakehouseError  # down: retry
                raise kind(f"cannot take the lease of {table}: {explain(error)}") from None
            held.leases.append(lease)
        stop = threading.Event()
        renewer = threading.Thread(
            target=_renew, args=(held, ttl / 3, stop), daemon=True, name="lease-renewer"
        )
        held.renewing = True
        renewer.start()
        try:
            yield held
        finally:
            stop.set()
            # Not waited for past the leases' end: a renewal stuck that long (S3 holding
            # it) will not make them this writer's again.
            renewer.join(max(0.0, min((lease.left_s() for lease in held.leases), default=0.0)))
    finally:
        # One that cannot be released now (S3 gone, or its renewal stuck) frees when it
        # expires, or when this process takes it again (the same writer restarted).
        if held.lost is None and not (renewer is not None and renewer.is_alive()):
            for lease in held.leases:
                with suppress(Exception):
                    lease.release()


@contextmanager
def _locked(root: str, tables: Sequence[str], application: str, exclusive: bool) -> Iterator[None]:
    """Hold the lock files of `tables` under a local `root`, shared or exclusive."""
    folder = Path(url2pathname(urlparse(root).path)) / "_leases"  # root: a file: URI
    folder.mkdir(parents=True, exist_ok=True)
    mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    files: list[int] = []
    try:
        for table in tables:
            files.append(os.open(folder / f"{table}.lock", os.O_RDWR | os.O_CREAT, 0o644))
            try:
                fcntl.flock(files[-1], mode | fcntl.LOCK_NB)
            except BlockingIOError:
                raise LeaseRefused(
                    f"{table} is in use: {application} needs it alone, and a writer of it "
                    "runs (the bronze or silver stream, `run all`, compaction); stop it first"
                    if exclusive
                    else f"{table} is held by a command that needs it alone (accepting a "
                    "Kafka change); run again once it has finished",
                    table,
                ) from None
        yield
    finally:
        for file in files:
            os.close(file)  # frees its lock


def _renew(held: Held, every_s: float, stop: threading.Event) -> None:
    try:
        # Every `every_s` from the start of the last round, not its end: the leases'
        # renewals keep their pace however long a round takes.
        began = time.monotonic()
        while not stop.wait(max(0.0, began + every_s - time.monotonic())):
            began = time.monotonic()
            for lease in held.leases:
                if stop.is_set():  # released, or about to be: renewed no more
                    return
                try:
                    lease.renew()
                except Exception as error:  # taken over, or S3 gone: the writer must stop
                    why = str(error) if isinstance(error, LakehouseError) else explain(error)
                    line = f"lost the lease of {lease.table}: {why}"
                    # S3 that did not answer: the writer stops, and once restarted takes
                    # its lease back unless another writer took it after it expired.
                    held.lost = Unavailable(line) if transient(error) else LeaseRefused(line)
                    return
                with held.renewed:
                    held.renewed.notify_all()
    finally:
        with held.renewed:
            held.renewing = False
            held.renewed.notify_all()
