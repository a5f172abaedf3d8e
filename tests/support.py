"""Helpers for tests: settings and CLI runs pointed at a test's own folder and topics."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lakehouse import PROJECT_ROOT
from lakehouse.settings import Settings, load_settings

S3_KEYS = ("lakehouse", "s3-lake-secret")
"""Access and secret key of the tests' S3 servers."""

METASTORE_ENV = "LAKEHOUSE__CATALOG__METASTORE"
"""Set by the `metastore` fixture for the whole run: every test shares its catalog."""


def overrides(storage_root: Path, bootstrap: str, topic_prefix: str, **keys: str) -> dict[str, str]:
    """Environment variables that isolate a run; `keys` like bronze__trigger_interval="1 second"."""
    env = {
        "LAKEHOUSE__STORAGE__ROOT": str(storage_root / "lake"),
        "LAKEHOUSE__STORAGE__LOCAL_STATE": str(storage_root / "state"),
        "LAKEHOUSE__QUALITY__LOCAL_DIR": str(storage_root / "quality"),
        "LAKEHOUSE__KAFKA__BOOTSTRAP_SERVERS": bootstrap,
        "LAKEHOUSE__KAFKA__TOPIC_PREFIX": topic_prefix,
        "LAKEHOUSE__KAFKA__PARTITIONS": "2",
        "LAKEHOUSE__SPARK__MASTER": "local[2]",
        "LAKEHOUSE__SPARK__SHUFFLE_PARTITIONS": "2",
    }
    if METASTORE_ENV in os.environ:
        env[METASTORE_ENV] = os.environ[METASTORE_ENV]
    env.update({f"LAKEHOUSE__{k.upper()}": v for k, v in keys.items()})
    return env


def settings_for(storage_root: Path, bootstrap: str, topic_prefix: str, **keys: str) -> Settings:
    return load_settings("local", environ=overrides(storage_root, bootstrap, topic_prefix, **keys))


def lakehouse_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "lakehouse.cli", *args]


def run_lakehouse(
    *args: str, env: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """The CLI in its own process, as a user or a scheduler would run it."""
    return subprocess.run(
        lakehouse_command(*args),
        env={**os.environ, **env},
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
