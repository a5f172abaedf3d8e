"""What the embedded services (Kafka broker, S3 server) share: their pid and ports.

Each service keeps its pid file and chosen ports under the local state folder, so any
process can find, reuse or stop it, and a restarted service keeps its address.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from lakehouse.core.errors import LakehouseError


def running_pid(pid_file: Path) -> int | None:
    """The pid in `pid_file` if that process is alive, else None."""
    if not pid_file.exists():
        return None
    pid = int(pid_file.read_text())
    return pid if alive(pid) else None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # An exited process answers kill(0) until its parent reaps it. Its main thread shows
    # as a zombie before the other threads have exited and closed its sockets (seen with
    # weed and the JVM), so it is gone only when it is a zombie of one thread: else a
    # restart right after stop finds its ports taken.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
    except FileNotFoundError:
        return False
    state, threads = fields[0], int(fields[17])
    return not (state == "Z" and threads <= 1)


def stop(pid_file: Path, timeout_s: float = 30.0) -> bool:
    """SIGTERM the process of `pid_file`, SIGKILL it after the timeout; False if none ran."""
    pid = running_pid(pid_file)
    if pid is None:
        pid_file.unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)
    return True


def kept_ports(ports_file: Path, count: int) -> list[int]:
    """`count` free loopback ports, the same ones as last time when they are still free."""
    if ports_file.exists():
        ports = [int(p) for p in ports_file.read_text().split()]
        if len(ports) == count and all(free(p) for p in ports):
            return ports
    ports = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    ports_file.write_text(" ".join(map(str, ports)))
    return ports


def free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(condition: Callable[[], bool], timeout_s: float, failure: str) -> None:
    """Poll `condition` until it holds; LakehouseError(`failure`) after the timeout."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise LakehouseError(failure)
        time.sleep(0.25)


def launch(
    name: str,
    command: list[str],
    pid_file: Path,
    log_file: Path,
    ready: Callable[[], bool],
    timeout_s: float,
    env: dict[str, str] | None = None,
) -> None:
    """Start `command` detached, its output in `log_file`, and wait until `ready()`.

    A start that exits or stays unready past the timeout is one line naming the log.
    """
    with log_file.open("ab") as log:
        process = subprocess.Popen(
            command,
            cwd=pid_file.parent,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C in a terminal must not take the service down
        )
    pid_file.write_text(str(process.pid))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise LakehouseError(
                f"{name} exited with code {process.returncode} while starting; see {log_file}"
            )
        if ready():
            return
        time.sleep(0.25)
    stop(pid_file)
    raise LakehouseError(f"{name} not ready after {timeout_s:.0f}s; see {log_file}")
