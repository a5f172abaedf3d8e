"""Shared fixtures: one real Kafka broker, one metastore and one Spark session per pytest
process (`make test` runs two side by side), and the order in which modules run."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakehouse.runtime.spark import build_spark
from lakehouse.services.kafka import EmbeddedKafka
from lakehouse.services.metastore import EmbeddedMetastore
from lakehouse.storage.catalog import LAYERS
from tests.support import INTERPRETED_PLANS, METASTORE_ENV, settings_for

# `make test` gives the modules to two workers, a module at a time, in collection order
# (`--dist loadfile --no-loadscope-reorder`): first those that kill nothing, then the fault
# tests. The longest go first, so that at the end neither worker runs a long module alone
# while the other has nothing left: these modules, longest first (`--durations` of a serial
# run), then the other integration modules, then the unit tests. xdist's own order, by
# number of tests, put the long modules last.
LONGEST_MODULES = (
    "test_faults.py",
    "test_gameday.py",
    "test_sessions.py",
    "test_silver.py",
    "test_shadow.py",
    "test_s3_lake.py",
    "test_compaction.py",
    "test_cluster.py",
    "test_build.py",
    "test_bronze.py",
    "test_explain.py",
    "test_sql.py",
    "test_gold.py",
    "test_quality.py",
    "test_quality_end_to_end.py",
    "test_run_all.py",
    "test_gold_quality.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> tuple[int, int]:
        if item.get_closest_marker("integration") is None:
            return (2, 0)
        name = item.path.name
        return (0, LONGEST_MODULES.index(name)) if name in LONGEST_MODULES else (1, 0)

    # A module ranks as its first test does: its tests stay together (and its fixtures
    # are made once), in their own order (the sort is stable).
    module_rank: dict[Path, tuple[int, int]] = {}
    for item in items:
        module_rank.setdefault(item.path, rank(item))
    items.sort(key=lambda item: module_rank[item.path])


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real broker on 127.0.0.1, stopped at the end even when tests fail."""
    broker = EmbeddedKafka(tmp_path_factory.mktemp("kafka"))
    address = broker.start()
    try:
        yield address
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def metastore(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real metastore on 127.0.0.1 that every Spark application of the run shares: this
    process's and those of the CLI runs (through the environment they inherit)."""
    server = EmbeddedMetastore(tmp_path_factory.mktemp("catalog"))
    url = server.start()
    os.environ[METASTORE_ENV] = url
    try:
        yield url
    finally:
        os.environ.pop(METASTORE_ENV, None)
        server.stop()


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory, metastore: str) -> Iterator[SparkSession]:
    settings = settings_for(tmp_path_factory.mktemp("lake"), "127.0.0.1:1", "unused.")
    # Its plans interpreted, as the CLI runs' are (`INTERPRETED_PLANS`).
    session = build_spark(settings, app_name="lakehouse-tests", extra=INTERPRETED_PLANS)
    # The databases of the shared metastore are placed on local disk before any job
    # creates them: a job's S3 server, where it would put them, may be killed by its test.
    for database in LAYERS:
        session.sql(f"CREATE DATABASE IF NOT EXISTS {database}")
    yield session
    session.stop()
