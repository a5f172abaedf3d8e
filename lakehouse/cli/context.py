"""What every command handler needs: the settings of the chosen target, and Spark."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from lakehouse.core.settings import Settings, load_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def settings_of(args: argparse.Namespace) -> Settings:
    return load_settings(args.target)


def spark_for(
    args: argparse.Namespace,
    app: str,
    extra: dict[str, str] | None = None,
    validates: bool = False,
    shadow: bool = False,
) -> tuple[Settings, SparkSession]:
    """The target's settings, on the lake's live versions of its layers (or its shadow's),
    and its Spark application for the command (`session_for`)."""
    from lakehouse.definitions import at_versions
    from lakehouse.runtime.spark import session_for

    settings = at_versions(settings_of(args), shadow)
    return settings, session_for(settings, app, extra, validates)


def invocation(args: argparse.Namespace) -> dict[str, Any]:
    """The command as parsed, for run_results.json: its arguments, not its handler."""
    return {k: v for k, v in vars(args).items() if k != "handler"}
