"""Publishing a static site to a real S3 server (SeaweedFS, started here)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lakehouse.core.errors import LakehouseError
from lakehouse.report.publish import publish_site
from lakehouse.services import s3 as s3_service
from lakehouse.services.s3 import EmbeddedS3
from tests.support import overrides, run_lakehouse, settings_for
from tests.support.browser import render

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
    endpoint = server.address()
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

    assert str(error.value) == f"cannot publish: no bucket 'no-such-bucket' at {s3.address()}"


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
    assert message.startswith(f"cannot publish to bucket 'reports' at {s3.address()}:")
    assert "403" in message or "SignatureDoesNotMatch" in message or "Forbidden" in message


def test_a_restarted_server_keeps_its_endpoint_and_its_objects(
    s3: EmbeddedS3, tmp_path: Path
) -> None:
    publish_site(write_site(tmp_path), "s3://reports/kept", client(s3))
    before = s3.address()

    s3.stop()
    assert s3.address() is None
    after = s3.start()

    assert after == before
    stored = client(s3).get_object(Bucket="reports", Key="kept/index.html")
    assert stored["Body"].read() == SITE["index.html"]


def test_a_published_page_served_over_http_runs_its_script_in_a_browser(
    s3: EmbeddedS3, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    (site / "js").mkdir(parents=True)
    (site / "index.html").write_text(
        '<!doctype html><html><head><script src="js/fill.js" defer></script></head>'
        '<body><p id="out">waiting</p></body></html>'
    )
    # The text exists only once the script has run: it is not in any file.
    (site / "js" / "fill.js").write_text(
        'document.getElementById("out").textContent = ["filled", "by", "script"].join("-");'
    )
    endpoint = s3.address()
    client(s3).create_bucket(Bucket="site")
    publish_site(site, "s3://site/page", client(s3))
    url = f"{endpoint}/site/page/index.html"
    with pytest.raises(urllib.error.HTTPError) as anonymous:
        urllib.request.urlopen(url, timeout=10)
    assert anonymous.value.code == 403

    # Served as a static website is: anonymous reads of the bucket's objects.
    client(s3).put_bucket_policy(
        Bucket="site",
        Policy=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": "*",
                        "Action": ["s3:GetObject"],
                        "Resource": ["arn:aws:s3:::site/*"],
                    }
                ],
            }
        ),
    )
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.headers["Content-Type"] == "text/html; charset=utf-8"
    screenshot = tmp_path / "page.png"
    dom = render(url, screenshot)

    assert '<p id="out">filled-by-script</p>' in dom
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_cli_starts_the_server_with_its_buckets_reports_it_and_stops_it(
    tmp_path: Path,
) -> None:
    env = overrides(tmp_path, "127.0.0.1:1", "unused.")
    settings = settings_for(tmp_path, "127.0.0.1:1", "unused.")
    try:
        started = run_lakehouse("s3", "start", "--bucket", "reports", "--bucket", "logs", env=env)
        running = run_lakehouse("s3", "status", env=env)
        buckets = s3_service.client(settings).list_buckets()["Buckets"]
    finally:
        stopped = run_lakehouse("s3", "stop", env=env)
    after = run_lakehouse("s3", "status", env=env)

    assert started.returncode == 0, started.stderr
    assert running.returncode == 0 and running.stdout.startswith("running at http://127.0.0.1:")
    assert {b["Name"] for b in buckets} == {"reports", "logs"}
    assert stopped.stdout == "S3 server stopped\n"
    assert (after.returncode, after.stdout) == (3, "not running\n")
    with pytest.raises(LakehouseError, match="embedded S3 server is not running"):
        s3_service.resolve_endpoint(settings)
