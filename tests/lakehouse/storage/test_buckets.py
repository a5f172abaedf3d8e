"""A lake on S3 whose bucket is missing or unreachable is refused in one line that says
what to do, before anything starts. The client is a plain object that answers `head_bucket`
as an S3 server does (botocore's own error), as what is judged is the line, not S3."""

from __future__ import annotations

from dataclasses import replace

import pytest
from botocore.exceptions import ClientError

from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import load_settings
from lakehouse.storage import buckets


class Answers:
    def __init__(self, code: str | None) -> None:
        self.code = code

    def head_bucket(self, Bucket: str) -> dict[str, str]:  # boto3 names it so
        if self.code is not None:
            raise ClientError({"Error": {"Code": self.code, "Message": "no"}}, "HeadBucket")
        return {}


def test_a_missing_or_unreachable_bucket_is_one_line_naming_the_way_on() -> None:
    settings = load_settings("local")
    on_s3 = replace(settings, storage=replace(settings.storage, root="s3a://lake-bucket/lake"))
    buckets.require(on_s3, Answers(None))
    buckets.require(settings, Answers("404"))  # a local lake has no bucket to ask for
    with pytest.raises(LakehouseError, match=r"bucket lake-bucket does not exist: .*storage init"):
        buckets.require(on_s3, Answers("NoSuchBucket"))
    with pytest.raises(LakehouseError, match=r"cannot reach bucket lake-bucket: AccessDenied"):
        buckets.require(on_s3, Answers("AccessDenied"))
