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
from tests.support import METASTORE_ENV, settings_for

TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
"""Every JVM of the tests (Spark's, the broker's, the metastore's, the CLI runs') compiles
with C1 alone: they live seconds to minutes on little data, where C2's compiling costs more
than it wins back (a CLI run ~18% faster, docs/testing.md). C1 alone shrinks the code cache
to 48 MB, which a long `run all` was seen to fill; 240 MB is the JVM's usual size. Never in
the deployed settings: a long-lived job wants C2's code."""


def pytest_configure(config: pytest.Config) -> None:
    # Before any fixture starts a JVM; every process the tests start inherits it.
    os.environ["JDK_JAVA_OPTIONS"] = (
        f"{TEST_JVM_OPTIONS} {os.environ.get('JDK_JAVA_OPTIONS', '')}".strip()
    )


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
    session = build_spark(settings, app_name="lakehouse-tests")
    # The databases of the shared metastore are placed on local disk before any job
    # creates them: a job's S3 server, where it would put them, may be killed by its test.
    for database in LAYERS:
        session.sql(f"CREATE DATABASE IF NOT EXISTS {database}")
    yield session
    session.stop()
