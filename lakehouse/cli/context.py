"""What every command handler needs: the settings of the chosen target, and Spark."""

from __future__ import annotations

import argparse
import threading
from importlib import import_module
from typing import TYPE_CHECKING

from lakehouse.console import divert, echo
from lakehouse.settings import Settings, load_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def settings_of(args: argparse.Namespace) -> Settings:
    return load_settings(args.target)


def spark_for(
    args: argparse.Namespace,
    app: str,
    extra: dict[str, str] | None = None,
    validates: bool = False,
) -> tuple[Settings, SparkSession]:
    """The target's settings and a Spark application named `lakehouse-<app>`, whose log
    (Spark's, the JVM's, Python's warnings) is named once on the console. `validates`: the
    command runs Great Expectations (a walk of the graph, its checks or its report)."""
    from lakehouse.spark import build_spark, log_file

    settings = settings_of(args)
    name = f"lakehouse-{app}"
    log = log_file(settings, name)
    echo(f"Spark log: {log}", err=True)
    divert(log)
    if not validates:
        return settings, build_spark(settings, app_name=name, extra=extra)
    # Great Expectations takes ~3 s of Python to import, and the JVM as long to start in a
    # process of its own: while this thread waits for the JVM, another imports.
    importing = threading.Thread(target=import_module, args=("great_expectations",), daemon=True)
    importing.start()
    spark = build_spark(settings, app_name=name, extra=extra)
    importing.join()
    return settings, spark


def pairs(counts: dict[str, int]) -> str:
    return ", ".join(f"{key}={value:,}" for key, value in counts.items())
