"""What the benchmarks share: traffic arguments, a broker of their own, run settings."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lakehouse.producer import TrafficSpec
from lakehouse.services.kafka import EmbeddedKafka
from lakehouse.settings import Settings, load_settings


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
    environ = {
        "LAKEHOUSE__STORAGE__ROOT": str(root),
        "LAKEHOUSE__QUALITY__LOCAL_DIR": str(root / "_quality"),
        "LAKEHOUSE__QUALITY__VALIDATE_STREAMS": "false",
        "LAKEHOUSE__CATALOG__METASTORE": "none",
        "LAKEHOUSE__KAFKA__BOOTSTRAP_SERVERS": bootstrap,
        **{f"LAKEHOUSE__{key.upper()}": value for key, value in keys.items()},
    }
    return load_settings("local", environ=environ)
