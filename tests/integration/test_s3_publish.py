"""Publishing a static site to a real S3 server (SeaweedFS, started here)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lakehouse.errors import LakehouseError
from lakehouse.publish import publish_site
from lakehouse.s3_server import EmbeddedS3

pytestmark = pytest.mark.integration

SITE = {
    "index.html": b"<!doctype html><html><body><h1>Data Docs</h1></body></html>",
    "static/styles/site.css": b"body { margin: 0 }",
    "static/vendor/app.js": b"document.title = 'ok';",
    "static/data.json": b'{"suites": 3}',
    "validations/bronze/sensor_records/run.html": b"<html><body>run</body></html>",
    "static/images/logo.svg": b"<svg xmlns='http://www.w3.org/2000/svg'/>",
}
TYPES = {
    "index.html": "text/html; charset=utf-8",
    "static/styles/site.css": "text/css; charset=utf-8",
    "static/vendor/app.js": "text/javascript; charset=utf-8",
    "static/data.json": "application/json",
    "validations/bronze/sensor_records/run.html": "text/html; charset=utf-8",
    "static/images/logo.svg": "image/svg+xml",
}


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedS3]:
    server = EmbeddedS3(tmp_path_factory.mktemp("s3"), "lakehouse", "test-secret")
    server.start(buckets=("reports",))
    try:
        yield server
    finally:
        server.stop()


def client(server: EmbeddedS3, secret: str | None = None) -> Any:
    endpoint = server.endpoint()
    assert endpoint is not None
    return EmbeddedS3(server.home, server.access_key, secret or server.secret_key).client(endpoint)


def write_site(folder: Path) -> Path:
    for name, body in SITE.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(body)
    return folder


def test_every_file_arrives_byte_for_byte_with_its_content_type(
    s3: EmbeddedS3, tmp_path: Path
) -> None:
    published = publish_site(write_site(tmp_path), "s3://reports/quality/latest/", client(s3))

    assert published.files == len(SITE)
    assert published.bytes == sum(map(len, SITE.values()))
    assert published.index_url == "s3://reports/quality/latest/index.html"
    for name, body in SITE.items():
        stored = client(s3).get_object(Bucket="reports", Key=f"quality/latest/{name}")
        assert stored["Body"].read() == body
        assert stored["ContentType"] == TYPES[name]


def test_a_missing_bucket_is_one_line_naming_bucket_and_endpoint(
    s3: EmbeddedS3, tmp_path: Path
) -> None:
    with pytest.raises(LakehouseError) as error:
        publish_site(write_site(tmp_path), "s3://no-such-bucket/docs", client(s3))

    assert str(error.value) == f"cannot publish: no bucket 'no-such-bucket' at {s3.endpoint()}"


@pytest.mark.parametrize("destination", ["http://reports/docs", "s3://", "reports/docs"])
def test_a_destination_that_is_not_an_s3_uri_is_refused(
    s3: EmbeddedS3, tmp_path: Path, destination: str
) -> None:
    with pytest.raises(LakehouseError, match="expected s3://bucket"):
        publish_site(write_site(tmp_path), destination, client(s3))


def test_a_wrong_secret_is_one_line_saying_so(s3: EmbeddedS3, tmp_path: Path) -> None:
    with pytest.raises(LakehouseError) as error:
        publish_site(write_site(tmp_path), "s3://reports/docs", client(s3, secret="wrong"))

    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"cannot publish to bucket 'reports' at {s3.endpoint()}:")
    assert "403" in message or "SignatureDoesNotMatch" in message or "Forbidden" in message


def test_a_restarted_server_keeps_its_endpoint_and_its_objects(
    s3: EmbeddedS3, tmp_path: Path
) -> None:
    publish_site(write_site(tmp_path), "s3://reports/kept", client(s3))
    before = s3.endpoint()

    s3.stop()
    assert s3.endpoint() is None
    after = s3.start()

    assert after == before
    stored = client(s3).get_object(Bucket="reports", Key="kept/index.html")
    assert stored["Body"].read() == SITE["index.html"]
