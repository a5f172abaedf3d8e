"""Faults at a chosen moment: a proxy in front of the S3 server that sees every request a
job makes and, at the first one that matches, holds it and strikes (kills the S3 server,
or the job), then cuts every connection like a dead server. The moment is then not a sleep that may
land anywhere but a named step of the job's work: before a batch's writes, during a
Parquet write, during a Delta commit, during a checkpoint write."""

from __future__ import annotations

import ctypes
import os
import re
import select
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from lakehouse.core.errors import LakehouseError
from lakehouse.services import process
from lakehouse.services.s3 import EmbeddedS3
from lakehouse.storage.buckets import bucket_and_prefix
from lakehouse.storage.lease import TableLease

_REQUEST_LINE = re.compile(rb"^([A-Z]+ \S+) HTTP/1\.1\r?$", re.MULTILINE)


@dataclass(frozen=True)
class Moment:
    """A step of a job's work on S3, known by the request that begins it: `request` is a
    regular expression over `METHOD /bucket/key?query` (path-style S3), looked for only
    once a request matching `after` has gone by."""

    name: str
    request: str
    after: str = ""


def in_next_batch(name: str, request: str, checkpoint: str) -> Moment:
    """`request` in the batch after the first one the job commits to `checkpoint` (a
    restarted job first redoes the batch its predecessor did not commit)."""
    return Moment(name, request, after=rf"^PUT /\S+/_checkpoints/{checkpoint}/commits/\d+$")


class Gate:
    """Forwards 127.0.0.1:<port> to `upstream` (an S3 endpoint), reading every request line
    a job sends. Armed with a moment (`arm`), it holds the first request that matches, runs
    the strike and cuts every connection, as a server gone at that moment would; `outage`
    makes it unreachable for a while. Game day puts its pipeline behind one for the day."""

    def __init__(self, upstream: str) -> None:
        address = urlparse(upstream)
        self._upstream = (address.hostname or "127.0.0.1", address.port or 80)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._down_until = 0.0
        self.moment: Moment | None = None
        self._pattern: re.Pattern[str] | None = None
        self._after: re.Pattern[str] | None = None
        self._strike: Callable[[], None] = lambda: None
        self.struck = threading.Event()
        self.struck_at: str | None = None
        """The request line the strike held."""
        self.requests: deque[str] = deque(maxlen=200)
        """The last request lines seen, in order: what to read when a moment never comes."""
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, moment: Moment, strike: Callable[[], None]) -> None:
        """At the first request of `moment` from now on, hold it and `strike`, once."""
        with self._lock:
            self.moment, self._pattern, self._strike = moment, re.compile(moment.request), strike
            self._after = re.compile(moment.after) if moment.after else None
            self.struck.clear()

    def outage(self, seconds: float) -> None:
        """Unreachable for `seconds`: open connections cut, new ones closed as they come."""
        with self._lock:
            self._down_until = time.monotonic() + seconds
            self._cut()

    def close(self) -> None:
        with suppress(OSError):
            self._listener.close()
        with self._lock:
            self._cut()

    def _cut(self) -> None:
        for sock in self._sockets:
            with suppress(OSError):
                sock.close()
        self._sockets.clear()

    def _refusing(self) -> bool:
        return time.monotonic() < self._down_until

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                server = socket.create_connection(self._upstream)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._refusing():
                    client.close()
                    server.close()
                    continue
                self._sockets |= {client, server}
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, requests: bool) -> None:
        with suppress(OSError):
            while data := source.recv(1 << 16):
                if requests:
                    for line in _REQUEST_LINE.findall(data):
                        request = line.decode("latin-1")
                        self.requests.append(request)
                        if self._pattern is None:
                            continue
                        if self._after is not None:
                            if self._after.search(request):
                                self._after = None  # armed from the next request on
                        elif self._pattern.search(request) and self._strike_once(request):
                            return  # held: never forwarded
                sink.sendall(data)
        for sock in (source, sink):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _strike_once(self, request: str) -> bool:
        with self._lock:
            if self._pattern is None:
                return self.struck.is_set()  # struck by another connection's request
            self.struck_at, self._pattern = request, None
            self._strike()
            self.struck.set()
            self._cut()
        return True


class FaultProxy(Gate):
    """A gate armed with `moment` from the start that, once struck, goes away for good:
    the request unanswered, every later connection refused."""

    def __init__(self, upstream: str, moment: Moment, strike: Callable[[], None]) -> None:
        super().__init__(upstream)
        self.arm(moment, strike)

    def _refusing(self) -> bool:
        return self.struck.is_set()

    def _strike_once(self, request: str) -> bool:
        held = super()._strike_once(request)
        self.close()
        return held


def kill_server(server: EmbeddedS3) -> Callable[[], None]:
    """The S3 server dies at once, as a crashed machine's would (SIGKILL)."""

    def strike() -> None:
        pid = process.running_pid(server.home / "server.pid")
        if pid is not None:
            os.kill(pid, signal.SIGKILL)

    return strike


def kill_job(job: Callable[[], subprocess.Popen[str]]) -> Callable[[], None]:
    """The job dies at once with its JVM, as on a lost machine (SIGKILL to the process group
    of a job started with `start_new_session=True`): no handler, no flush, no clean stop."""
    return lambda: os.killpg(job().pid, signal.SIGKILL)


@contextmanager
def proxy(upstream: str, moment: Moment, strike: Callable[[], None]) -> Iterator[FaultProxy]:
    """A `FaultProxy` closed on leaving, struck or not."""
    fault = FaultProxy(upstream, moment, strike)
    try:
        yield fault
    finally:
        fault.close()


class MomentMissed(LakehouseError):
    """The job ended, or the moment never came, before the fault could strike."""


def wait_struck(fault: Gate, timeout_s: float, alive: Callable[[], bool]) -> None:
    """Until the fault struck; MomentMissed, naming the requests seen, if the job ended or
    the moment never came."""
    deadline, name = time.monotonic() + timeout_s, fault.moment.name if fault.moment else ""
    while not fault.struck.wait(0.5):
        recent = "\n".join(list(fault.requests)[-30:])
        if not alive() and not fault.struck.is_set():  # struck: the job is killed
            raise MomentMissed(f"the job ended before {name}; last requests:\n{recent}")
        if time.monotonic() > deadline:
            raise MomentMissed(f"no {name}; last requests:\n{recent}")


def wait_leases_expired(client: Any, root: str) -> None:
    """Until every table lease under `root` has expired (`client`: boto3's, of the store): a
    struck job could not release its own, and the next writer is refused until then. Read
    from the leases, not slept: by the time a job is struck and reaped, most of its lease
    time has usually gone by."""
    bucket, prefix = bucket_and_prefix(root)
    folder = f"{prefix}/_leases/".lstrip("/")
    listed = client.list_objects_v2(Bucket=bucket, Prefix=folder, Delimiter="/")
    tables = [p["Prefix"][len(folder) : -1] for p in listed.get("CommonPrefixes", [])]
    grants = [TableLease(client, bucket, prefix, table, "", 0).current() for table in tables]
    wait = max((g.expires - time.time() for g in grants if g is not None), default=0.0)
    if wait > 0:
        time.sleep(wait + 0.05)  # a lease is refused until `expires` has gone by


def _numbered(folder: Path) -> set[int]:
    """The numbered files of a checkpoint's or a Delta log's folder (`7`, `00007.json`)."""
    if not folder.exists():
        return set()
    return {int(p.name.split(".")[0]) for p in folder.iterdir() if p.name.split(".")[0].isdigit()}


class LocalMoment:
    """A moment of a stream's batch on a local lake, seen in its folders: the checkpoint's
    offsets (planned), the table's Delta log (committed), the checkpoint's commits. Armed
    at the state the folders are in now; `strike_at` looks each time a file lands there, so
    the strike follows the moment within a millisecond or so (on S3 `FaultProxy` holds the
    very request)."""

    def __init__(self, moment: str, checkpoint: Path, table: Path) -> None:
        self.moment, self.checkpoint, self.log = moment, checkpoint, table / "_delta_log"
        self.folders = (checkpoint / "offsets", self.log, checkpoint / "commits")
        self.rearm()

    def rearm(self) -> None:
        """Armed again for the next batch: this one went past the moment unseen."""
        self.planned, self.version, self.commits = (
            max(_numbered(f), default=-1) for f in self.folders
        )

    def reached(self) -> bool:
        commits = max(_numbered(self.checkpoint / "commits"), default=-1)
        match self.moment:
            case "before-writes":
                planned = max(_numbered(self.checkpoint / "offsets"), default=-1)
                return planned > max(self.planned, commits)
            case "after-delta-commit":
                return max(_numbered(self.log), default=-1) > self.version and (
                    commits == self.commits
                )
            case _:  # after-commit
                return commits > self.commits

    def passed(self) -> bool:
        """A batch committed without the moment seen: between a Delta commit and its
        checkpoint's commit there may be only milliseconds."""
        return not self.reached() and (
            max(_numbered(self.checkpoint / "commits"), default=-1) > self.commits
        )


class _FolderWatch:
    """Wakes when a file is made in, or renamed into, one of `folders` (Linux inotify); where
    that is not to be had, or a folder is not made yet, it wakes every 5 ms."""

    _EVENTS = 0x100 | 0x80  # IN_CREATE | IN_MOVED_TO

    def __init__(self, folders: tuple[Path, ...]) -> None:
        self._fd: int | None = None
        libc = ctypes.CDLL(None, use_errno=True)
        if not hasattr(libc, "inotify_init1") or not all(f.is_dir() for f in folders):
            return
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd >= 0 and all(
            libc.inotify_add_watch(fd, os.fsencode(f), self._EVENTS) >= 0 for f in folders
        ):
            self._fd = fd
        elif fd >= 0:
            os.close(fd)

    def wait(self) -> None:
        if self._fd is None:
            time.sleep(0.005)
            return
        select.select([self._fd], [], [], 0.5)
        with suppress(BlockingIOError):
            os.read(self._fd, 1 << 16)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)


def strike_at(
    moment: LocalMoment,
    strike: Callable[[], None],
    timeout_s: float,
    alive: Callable[[], bool],
    more: Callable[[], None] = lambda: None,
) -> None:
    """Watch for `moment` and strike once it is reached. A batch that went past it unseen
    arms it again and calls `more` (traffic for another batch). MomentMissed if the job
    ended or the moment did not come within `timeout_s`."""
    deadline, watch = time.monotonic() + timeout_s, _FolderWatch(moment.folders)
    try:
        while not moment.reached():
            if moment.passed():
                moment.rearm()
                more()
            if not alive():
                raise MomentMissed(f"the job ended before {moment.moment}")
            if time.monotonic() > deadline:
                raise MomentMissed(f"no {moment.moment} within {timeout_s:.0f} s")
            watch.wait()
        strike()
    finally:
        watch.close()
