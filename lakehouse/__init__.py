"""The shared runtime of the lakehouse: settings, Spark session, CLI and embedded services."""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
