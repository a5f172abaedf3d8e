"""What the benchmarks share: traffic arguments, a broker of their own, run settings."""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from lakehouse.core.settings import Settings, load_settings
from lakehouse.ops.producer import TrafficSpec
from lakehouse.services.kafka import EmbeddedKafka


def traffic_parser(
    doc: str | None, sessions: int = 100, updates: int = 998
) -> argparse.ArgumentParser:
    """The arguments that size the traffic a benchmark produces."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sensors", type=int, default=10)
    parser.add_argument("--sessions", type=int, default=sessions, help="per sensor")
    parser.add_argument("--updates", type=int, default=updates, help="per session")
    parser.add_argument("--rows", type=int, default=200, help="per snapshot")
    return parser


def traffic_spec(args: argparse.Namespace, **keys: Any) -> TrafficSpec:
    """The traffic `traffic_parser`'s arguments ask for; `keys` set the rest."""
    return TrafficSpec(
        sensors=args.sensors,
        sessions_per_sensor=args.sessions,
        updates_per_session=args.updates,
        rows_per_snapshot=args.rows,
        **keys,
    )


@contextmanager
def broker(root: Path) -> Iterator[str]:
    """A broker of the benchmark's own under `root`, stopped at the end; its address."""
    kafka = EmbeddedKafka(root / "kafka")
    address = kafka.start()
    try:
        yield address
    finally:
        kafka.stop()


def run_settings(root: Path, bootstrap: str = "unused:1", **keys: str) -> Settings:
    """Settings of one measured run, its tables under `root`: no catalog (a metastore would
    be measured too), and no in-stream validation unless `keys` ask for it
    (`quality__validate_streams="true"`; benchmarks/quality.py measures what it costs)."""
    return load_settings("local", environ=run_environ(root, bootstrap, **keys))


def run_environ(root: Path, bootstrap: str = "unused:1", **keys: str) -> dict[str, str]:
    """`run_settings` as environment variables, for jobs run as their own processes."""
    return {
        "LAKEHOUSE__STORAGE__ROOT": str(root),
        "LAKEHOUSE__QUALITY__LOCAL_DIR": str(root / "_quality"),
        "LAKEHOUSE__QUALITY__VALIDATE_STREAMS": "false",
        "LAKEHOUSE__CATALOG__METASTORE": "none",
        "LAKEHOUSE__KAFKA__BOOTSTRAP_SERVERS": bootstrap,
        **{f"LAKEHOUSE__{key.upper()}": value for key, value in keys.items()},
    }


def timed(work: Callable[..., object], *args: Any) -> float:
    """Seconds `work(*args)` took."""
    started = time.perf_counter()
    work(*args)
    return time.perf_counter() - started


def medians(seconds: dict[str, list[float]], baseline: str, title: Callable[[str], str]) -> None:
    """Each way's median of its `seconds` and its ratio to the `baseline` way's, a line each."""
    base = statistics.median(seconds[baseline])
    for name, runs in seconds.items():
        median = statistics.median(runs)
        print(f"{title(name)}: median {median:.2f} s ({len(runs)} runs), ratio {median / base:.2f}")


def fmt(seconds: list[float]) -> str:
    """Runs as `4.2s, 3.3s`."""
    return ", ".join(f"{s:.1f}s" for s in seconds)


class PeakMemory:
    """Peak resident memory of this process's JVM (driver and, in local mode, executors)
    and of the largest Python worker, sampled from /proc while a run goes on; and the
    JVM's peak heap use, from its own memory pools."""

    def __init__(self, spark: SparkSession, every_s: float = 0.2) -> None:
        self.jvm_bytes = self.worker_bytes = self.heap_bytes = 0
        self._pools = [
            p
            for p in spark._jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans()  # type: ignore[union-attr]
            if str(p.getType()) == "Heap memory"
        ]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(every_s,), daemon=True)

    def __enter__(self) -> PeakMemory:
        for pool in self._pools:
            pool.resetPeakUsage()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        # Each pool's own peak: their sum bounds the heap's peak from above.
        self.heap_bytes = sum(pool.getPeakUsage().getUsed() for pool in self._pools)

    def _sample(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            for pid, (command, rss, peak) in _processes().items():
                if command == "java" and _descends_from(pid, os.getpid()):
                    self.jvm_bytes = max(self.jvm_bytes, peak)
                elif command.startswith("python") and _descends_from(pid, os.getpid(), 3):
                    self.worker_bytes = max(self.worker_bytes, rss)


def _processes() -> dict[int, tuple[str, int, int]]:
    found = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(
                line.split(":", 1) for line in status.read_text().splitlines() if ":" in line
            )
        except OSError:
            continue
        kib = {k: int(fields.get(k, "0 kB").split()[0]) * 1024 for k in ("VmRSS", "VmHWM")}
        found[int(status.parent.name)] = (fields["Name"].strip(), kib["VmRSS"], kib["VmHWM"])
    return found


def _descends_from(pid: int, ancestor: int, depth: int = 1) -> bool:
    for _ in range(depth + 1):
        try:
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return False
        if parent == ancestor:
            return True
        pid = parent
    return False
