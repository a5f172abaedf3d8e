"""The lake's storage: making sure it can hold the lake, and what each table takes.

On S3 (`storage.root` = `s3a://<bucket>/<prefix>`) this talks to the bucket with boto3, not
Spark: a bucket check must answer in a second, before any job starts. A local root is a
folder.
"""

from __future__ import annotations

import os
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from lakehouse.core.console import echo
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings


@dataclass(frozen=True)
class Usage:
    """What one table or checkpoint keeps on storage."""

    name: str
    """`silver.sessions`, or `checkpoint silver.sessions_stream`."""
    files: int
    bytes: int


def bucket_and_prefix(root: str) -> tuple[str, str]:
    parsed = urlparse(root)
    return parsed.netloc, parsed.path.strip("/")


def require(settings: Settings, client: Any = None) -> None:
    """Refuse in one line a lake on S3 whose bucket does not exist or cannot be reached:
    `lakehouse storage init` creates it (`client`: the S3 client to ask, else the settings')."""
    if not settings.storage.root.startswith("s3a://"):
        return
    from botocore.exceptions import ClientError

    from lakehouse.services import s3

    bucket, _ = bucket_and_prefix(settings.storage.root)
    try:
        (client or s3.client(settings)).head_bucket(Bucket=bucket)
    except ClientError as error:
        if _code(error) in ("404", "NoSuchBucket", "NotFound"):
            raise LakehouseError(
                f"the lake's bucket {bucket} does not exist: create it with "
                "`lakehouse storage init`"
            ) from None
        raise LakehouseError(f"cannot reach bucket {bucket}: {_problem(error)}") from None


def init(settings: Settings, echo: Callable[[str], None] = echo) -> None:
    """Create or check the lake's bucket (or folder), say what it found, and refuse one
    this application cannot write."""
    root = settings.storage.root
    if not root.startswith("s3a://"):
        folder = Path(urlparse(root).path)
        folder.mkdir(parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK):
            raise LakehouseError(f"cannot write to {folder}")
        echo(f"storage: local folder {folder}, writable")
        return
    from botocore.exceptions import ClientError

    from lakehouse.services import s3

    client = s3.client(settings)
    bucket, prefix = bucket_and_prefix(root)
    try:
        client.head_bucket(Bucket=bucket)
        echo(f"bucket {bucket}: exists")
    except ClientError as error:
        if _code(error) not in ("404", "NoSuchBucket", "NotFound"):
            raise LakehouseError(f"cannot reach bucket {bucket}: {_problem(error)}") from None
        _create_bucket(client, bucket, settings.s3.region)
        echo(f"bucket {bucket}: created")
    echo(f"  versioning: {_versioning(client, bucket)}")
    echo(f"  lifecycle:  {_lifecycle(client, bucket)}")
    probe = f"{prefix}/_lakehouse/write-probe-{uuid.uuid4().hex[:8]}".lstrip("/")
    try:
        client.put_object(Bucket=bucket, Key=probe, Body=b"")
        client.delete_object(Bucket=bucket, Key=probe)
    except ClientError as error:
        raise LakehouseError(
            f"cannot write to s3://{bucket}/{prefix}: {_problem(error)}; "
            "the lake needs put, get, list and delete there"
        ) from None
    echo(f"  s3://{bucket}/{prefix}: writable")


def usage(settings: Settings) -> list[Usage]:
    """Files and bytes per table and per stream checkpoint under the root, largest first."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for key, size in _objects(settings):
        parts = key.split("/")
        if parts[0] == "_checkpoints" and len(parts) > 3:
            name = f"checkpoint {parts[1]}.{parts[2]}"
        elif len(parts) > 2 and not parts[0].startswith("_"):
            name = f"{parts[0]}.{parts[1]}"
        else:
            name = "other"
        totals[name][0] += 1
        totals[name][1] += size
    found = [Usage(name, files, size) for name, (files, size) in totals.items()]
    return sorted(found, key=lambda u: (-u.bytes, u.name))


def _objects(settings: Settings) -> list[tuple[str, int]]:
    """(key relative to the root, size) of everything under it."""
    root = settings.storage.root
    if not root.startswith("s3a://"):
        folder = Path(urlparse(root).path)
        return [
            (str(path.relative_to(folder)), path.stat().st_size)
            for path in folder.rglob("*")
            if path.is_file()
        ]
    from lakehouse.services import s3

    bucket, prefix = bucket_and_prefix(root)
    pages = (
        s3.client(settings)
        .get_paginator("list_objects_v2")
        .paginate(Bucket=bucket, Prefix=f"{prefix}/" if prefix else "")
    )
    start = len(prefix) + 1 if prefix else 0
    return [
        (item["Key"][start:], int(item["Size"]))
        for page in pages
        for item in page.get("Contents", [])
    ]


def _create_bucket(client: Any, bucket: str, region: str) -> None:
    from botocore.exceptions import ClientError

    # us-east-1 is S3's default region and refuses to be named as a location.
    where = {} if region == "us-east-1" else {"LocationConstraint": region}
    try:
        client.create_bucket(
            Bucket=bucket, **({"CreateBucketConfiguration": where} if where else {})
        )
    except ClientError as error:
        raise LakehouseError(f"cannot create bucket {bucket}: {_problem(error)}") from None


def _versioning(client: Any, bucket: str) -> str:
    status = client.get_bucket_versioning(Bucket=bucket).get("Status")
    if status == "Enabled":
        return (
            "enabled: files VACUUM deletes stay as noncurrent versions and cost storage "
            "until a lifecycle rule expires them"
        )
    return f"{(status or 'never enabled').lower()}"


def _lifecycle(client: Any, bucket: str) -> str:
    from botocore.exceptions import ClientError

    try:
        rules = client.get_bucket_lifecycle_configuration(Bucket=bucket).get("Rules", [])
    except ClientError as error:
        if _code(error) in ("NoSuchLifecycleConfiguration", "404"):
            return "no rules"
        return f"unknown ({_problem(error)})"
    return f"{len(rules)} rule(s): " + ", ".join(r.get("ID", "unnamed") for r in rules)


def _code(error: Any) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _problem(error: Any) -> str:
    detail = error.response.get("Error", {})
    return f"{detail.get('Code')}: {detail.get('Message') or 'no message'}"
