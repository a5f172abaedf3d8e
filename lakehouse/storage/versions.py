"""Where the lake keeps which version of each layer is live (`core/versions.py`).

A sequence of small documents, `<root>/_versions/<generation>.json`, each created only if
absent, as a table's lease is: a change read at generation n is kept only if it creates
n+1, so of two commands changing the versions at once one is refused, never both kept.
The newest says how things stand. A lake without any is at its first version throughout.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

from pyspark.sql import SparkSession

from lakehouse.core import versions
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings
from lakehouse.core.versions import Versions
from lakehouse.storage import catalog

FOLDER = "_versions"


def read(settings: Settings) -> Versions:
    """How the lake's versions stand now."""
    root = settings.storage.root
    if root.startswith("s3a://"):
        from botocore.exceptions import ClientError

        client, bucket, prefix = _s3(settings)
        try:
            keys = [
                item["Key"]
                for page in client.get_paginator("list_objects_v2").paginate(
                    Bucket=bucket, Prefix=prefix
                )
                for item in page.get("Contents", [])
            ]
        except ClientError as error:  # no bucket yet: the command that needs one says so
            if error.response.get("Error", {}).get("Code") != "NoSuchBucket":
                raise
            keys = []
        if not keys:
            return Versions()
        body = client.get_object(Bucket=bucket, Key=max(keys))["Body"].read()
        return Versions.of_json(json.loads(body))
    folder = _local(root)
    found = sorted(folder.glob("*.json")) if folder.is_dir() else []
    return Versions.of_json(json.loads(found[-1].read_text())) if found else Versions()


def read_in(spark: SparkSession, root: str) -> Versions:
    """`read` through Spark's own storage client, for code that has a session and a
    table's location but not the settings (a table's create)."""
    fs, folder = catalog.hadoop_fs(spark, f"{root}/{FOLDER}")
    if not fs.exists(folder):
        return Versions()
    names = [n for s in fs.listStatus(folder) if (n := s.getPath().getName()).endswith(".json")]
    if not (kept := [n for n in names if not n.startswith(".")]):  # a local draft
        return Versions()
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    stream = fs.open(jvm.org.apache.hadoop.fs.Path(f"{root}/{FOLDER}/{max(kept)}"))
    try:
        return Versions.of_json(
            json.loads(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        )
    finally:
        stream.close()


def name_if_live(spark: SparkSession, name: str, location: str) -> None:
    """Make the catalog's `name` name the table at `location` if that is the live
    version's, by the lake's versions as they stand now: a shadow's table is named by its
    swap, and a retired version's writer, still in its last turn after a swap, must not
    take the name back from the live one."""
    if not catalog.names(spark, name, location) and _live(spark, name, location):
        catalog.register(spark, name, location)


def _live(spark: SparkSession, name: str, location: str) -> bool:
    lake = versions.lake_of(name, location)
    if lake is None or versions.part_of(name) is None:
        return True  # a table of one version, or not in a lake's layout: always its own
    root, tag = lake
    return versions.names(read_in(spark, root), name, tag)


def write(settings: Settings, read_before: Versions, changed: Versions) -> Versions:
    """Keep `changed`, made from `read_before`, as the next generation; refused in one
    line if another command kept one since."""
    kept = replace(changed, generation=read_before.generation + 1)
    body = json.dumps(kept.as_json(), indent=2).encode()
    name = f"{kept.generation:020d}.json"
    if settings.storage.root.startswith("s3a://"):
        created = _create_s3(settings, name, body)
    else:
        created = _create_local(_local(settings.storage.root), name, body)
    if not created:
        raise LakehouseError(
            "the lake's versions changed while this command ran (another `lakehouse shadow` "
            "command?): look at `lakehouse shadow status`, then run it again"
        )
    return kept


def _create_local(folder: Path, name: str, body: bytes) -> bool:
    """Write the file whole, then link it into place: the link fails if it exists."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=folder, prefix=".", delete=False) as draft:
        draft.write(body)
    try:
        os.link(draft.name, folder / name)
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(draft.name)


def _create_s3(settings: Settings, name: str, body: bytes) -> bool:
    from botocore.exceptions import ClientError

    client, bucket, prefix = _s3(settings)
    try:
        client.put_object(Bucket=bucket, Key=f"{prefix}{name}", Body=body, IfNoneMatch="*")
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("PreconditionFailed", "412"):
            return False
        raise
    return True


def _s3(settings: Settings) -> tuple[Any, str, str]:
    from lakehouse.services import s3
    from lakehouse.storage.buckets import bucket_and_prefix

    bucket, prefix = bucket_and_prefix(settings.storage.root)
    return s3.client(settings), bucket, f"{prefix}/{FOLDER}/".lstrip("/")


def _local(root: str) -> Path:
    return Path(url2pathname(urlparse(root).path)) / FOLDER
