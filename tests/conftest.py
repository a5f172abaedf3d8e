"""Shared fixtures: one real Kafka broker, one metastore and one Spark session per test run."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from lakehouse.catalog import LAYERS
from lakehouse.services.kafka import EmbeddedKafka
from lakehouse.services.metastore import EmbeddedMetastore
from lakehouse.spark import build_spark
from tests.support import INTERPRETED_PLANS, METASTORE_ENV, settings_for


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real broker on 127.0.0.1, stopped at the end even when tests fail."""
    broker = EmbeddedKafka(tmp_path_factory.mktemp("kafka"))
    address = broker.start()
    try:
        yield address
    finally:
        broker.stop()


@pytest.fixture(scope="session", autouse=True)
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
