"""Fixtures of the integration tests: the metastore every one of them shares, and those
that only some modules use."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lakehouse.services.s3 import EmbeddedS3
from tests.support import S3_KEYS


@pytest.fixture(scope="session", autouse=True)
def _shared_metastore(metastore: str) -> str:
    """Every integration test shares the metastore, whether it builds a Spark session here
    or runs the CLI (started before any module's fixtures); a unit test starts no JVM."""
    return metastore


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedS3]:
    """A real S3 server (SeaweedFS) with the bucket `lake`, for one test module."""
    server = EmbeddedS3(tmp_path_factory.mktemp("s3"), *S3_KEYS)
    server.start(buckets=("lake",))
    try:
        yield server
    finally:
        server.stop()
