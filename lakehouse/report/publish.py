"""Publishing a static site (the Data Docs) to S3: Great Expectations 1.13+ builds Data
Docs to a local folder only, so the upload is the project's own step."""

from __future__ import annotations

import mimetypes
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lakehouse.core.errors import LakehouseError

# Browsers refuse a script or a style sheet served with the wrong type; mimetypes depends
# on the machine's /etc/mime.types, so the web types are fixed here.
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".woff": "font/woff",
    ".woff2": "font/woff2",
    ".ttf": "font/ttf",
    ".otf": "font/otf",
}


@dataclass(frozen=True)
class PublishReport:
    files: int
    bytes: int
    index_url: str
    """`s3://bucket/prefix/index.html`."""


def split_destination(destination: str) -> tuple[str, str]:
    """`s3://bucket/prefix` -> (bucket, prefix without slashes at the ends)."""
    scheme, _, rest = destination.partition("://")
    bucket, _, prefix = rest.partition("/")
    if scheme not in ("s3", "s3a") or not bucket:
        raise LakehouseError(f"--publish {destination!r}: expected s3://bucket[/prefix]")
    return bucket, prefix.strip("/")


def content_type(path: Path) -> str:
    guessed, _ = mimetypes.guess_type(path.name)
    return CONTENT_TYPES.get(path.suffix.lower(), guessed or "application/octet-stream")


def publish_site(site: Path, destination: str, client: Any) -> PublishReport:
    """Upload every file under `site` to `destination`, each with its content type."""
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, prefix = split_destination(destination)
    where = f"bucket {bucket!r} at {client.meta.endpoint_url}"
    try:
        client.head_bucket(Bucket=bucket)
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        if code in ("404", "NoSuchBucket"):
            raise LakehouseError(f"cannot publish: no {where}") from None
        raise LakehouseError(f"cannot publish to {where}: {_reason(error)}") from None
    except BotoCoreError as error:
        raise LakehouseError(f"cannot publish to {where}: {error}") from None

    files = sorted(p for p in site.rglob("*") if p.is_file())
    total = 0
    for path in files:
        key = "/".join(filter(None, (prefix, path.relative_to(site).as_posix())))
        try:
            client.upload_file(
                str(path), bucket, key, ExtraArgs={"ContentType": content_type(path)}
            )
        except (ClientError, BotoCoreError) as error:
            raise LakehouseError(f"cannot publish {key} to {where}: {_reason(error)}") from None
        total += path.stat().st_size
    index = "/".join(filter(None, (prefix, "index.html")))
    return PublishReport(len(files), total, f"s3://{bucket}/{index}")


def _reason(error: Exception) -> str:
    response = getattr(error, "response", None) or {}
    detail = response.get("Error", {})
    return f"{detail.get('Code', '')}: {detail.get('Message', error)}".strip(": ")
