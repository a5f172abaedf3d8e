"""Where S3 is (`embedded`, a URL, or AWS itself) and a boto3 client for it."""

from __future__ import annotations

from typing import Any

from lakehouse.errors import LakehouseError
from lakehouse.settings import EMBEDDED, Settings


def resolve_endpoint(settings: Settings) -> str | None:
    """The configured endpoint, the running embedded server's, or None for AWS itself."""
    if settings.s3.endpoint != EMBEDDED:
        return settings.s3.endpoint or None
    from lakehouse.s3_server import EmbeddedS3

    server = EmbeddedS3.under(settings.storage.local_state_dir, "", "")
    endpoint = server.endpoint()
    if endpoint is None:
        raise LakehouseError(
            f"the embedded S3 server is not running (state in {server.home}); "
            "start it with `lakehouse s3 start`"
        )
    return endpoint


def client(settings: Settings) -> Any:
    """A boto3 S3 client for the `s3` settings."""
    s3 = settings.s3
    return s3_client(resolve_endpoint(settings), s3.region, s3.access_key, s3.secret_key)


def s3_client(endpoint: str | None, region: str, access_key: str, secret_key: str) -> Any:
    import boto3
    from botocore.config import Config

    # Path-style addressing: local servers have no wildcard DNS for bucket subdomains.
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id=access_key or None,
        aws_secret_access_key=secret_key or None,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
    )
