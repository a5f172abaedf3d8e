"""Shared fixtures: one real Kafka broker and one Spark session per test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from lakehouse.kafka_broker import EmbeddedKafka
from lakehouse.spark import build_spark
from tests.support import settings_for


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
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    settings = settings_for(tmp_path_factory.mktemp("lake"), "127.0.0.1:1", "unused.")
    session = build_spark(settings.spark, app_name="lakehouse-tests")
    yield session
    session.stop()
