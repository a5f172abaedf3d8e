"""OpenLineage's JSON schema, to hold every event the project emits against it.

No OpenLineage package ships its spec (`spec/` of OpenLineage's repository): not the Python
client, nor the Java ones. One registry package does, unchanged from OpenLineage's tag 1.50.0:
the crate `datafusion-openlineage` 0.0.12 on crates.io, as its test fixtures. It holds the core
schema `2-0-2` (the pinned client 1.54.0's) and twelve facets; each facet an event carries is
checked against that facet's schema at the event's own version where the crate has it, else at
the crate's (`OLDER_FACETS`), or against the client's class of it where the crate has none
(`NOT_IN_SPEC`). The crate is fetched once, pinned by its checksum, into the
local state.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import urllib.request
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker
from referencing import Registry, Resource

from lakehouse import PROJECT_ROOT

CRATE = "https://static.crates.io/crates/datafusion-openlineage/datafusion-openlineage-0.0.12.crate"
CRATE_SHA256 = "c3174cdfb83e6ada02b64b2684f696ca382886cae5ce98d12ec802bbb1392129"
SPEC_IN_CRATE = "datafusion-openlineage-0.0.12/tests/schemas/openlineage/"
SPEC_DIR = PROJECT_ROOT / ".state" / "openlineage-spec"
CORE = "https://openlineage.io/spec/2-0-2/OpenLineage.json"

OLDER_FACETS = {"ParentRunFacet": "1-1-0", "JobTypeJobFacet": "2-0-3"}
"""Facets the pinned client writes at a newer version than the crate's schema: checked at
the crate's (the newer ones add optional fields only)."""
NOT_IN_SPEC = {
    "DataQualityAssertionsDatasetFacet": (
        "data_quality_assertions_dataset",
        "assertions",
        "Assertion",
    ),
    "TagsRunFacet": ("tags_run", "tags", "TagsRunFacetFields"),
}
"""Facets whose schema the crate lacks, each a list of items: checked against the pinned
client's classes of them (its module, the list's field, the item's class)."""


def spec_dir() -> Path:
    """The spec's files, fetched from crates.io on first use."""
    if not (SPEC_DIR / "OpenLineage.json").exists():
        with urllib.request.urlopen(CRATE, timeout=60) as response:
            data = response.read()
        digest = hashlib.sha256(data).hexdigest()
        assert digest == CRATE_SHA256, f"{CRATE}: sha256 {digest}, expected {CRATE_SHA256}"
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as crate:
            for member in crate.getmembers():
                if member.isfile() and member.name.startswith(SPEC_IN_CRATE):
                    target = SPEC_DIR / member.name[len(SPEC_IN_CRATE) :]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(crate.extractfile(member).read())  # type: ignore[union-attr]
    return SPEC_DIR


@cache
def _schemas() -> dict[str, dict[str, Any]]:
    """Every schema of the spec by its `$id`."""
    folder = spec_dir()
    documents = [json.loads(p.read_text()) for p in sorted(folder.rglob("*.json"))]
    return {d["$id"]: d for d in documents}


def _validator(schema: dict[str, Any]) -> Draft202012Validator:
    registry = Registry().with_resources(
        (uri, Resource.from_contents(d)) for uri, d in _schemas().items()
    )
    return Draft202012Validator(schema, registry=registry, format_checker=FormatChecker())


def problems(event: dict[str, Any]) -> list[str]:
    """What in `event` (a run event as JSON) the spec does not allow: the event against
    the core schema, then each facet against its own."""
    found = [f"event: {e.message}" for e in _validator(_schemas()[CORE]).iter_errors(event)]
    for where, key, facet in _facets(event):
        url = facet.get("_schemaURL", "")
        name = url.rsplit("/", 1)[-1].split(".json")[0]
        if name in NOT_IN_SPEC:
            found += [f"{where}.{key}: {p}" for p in _against_client(name, facet)]
            continue
        version = OLDER_FACETS.get(name, url.split("/facets/")[-1].split("/")[0])
        schema = _schemas().get(f"https://openlineage.io/spec/facets/{version}/{name}.json")
        if schema is None:
            found.append(f"{where}.{key}: no schema for {url}")
            continue
        found += [
            f"{where}.{key}: {e.message}" for e in _validator(schema).iter_errors({key: facet})
        ]
    return found


def _against_client(name: str, facet: dict[str, Any]) -> list[str]:
    """A facet against the pinned client's classes of it: every field they require, none
    they do not know, and the type of each required string or boolean."""
    import importlib

    import attr

    module, items, item = NOT_IN_SPEC[name]
    classes = importlib.import_module(f"openlineage.client.generated.{module}")
    body = {k: v for k, v in facet.items() if not k.startswith("_")}
    try:
        made = [getattr(classes, item)(**each) for each in body.pop(items)]
        getattr(classes, name)(**{items: made}, **body)
    except (KeyError, TypeError) as error:
        return [str(error)]
    kinds = {"str": str, "bool": bool}
    return [
        f"{item}.{f.name}: {getattr(each, f.name)!r} is not a {f.type}"
        for each in made
        for f in attr.fields(type(each))
        if f.default is attr.NOTHING
        and f.type in kinds
        and not isinstance(getattr(each, f.name), kinds[f.type])
    ]


def _facets(event: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(where, key, facet) of every facet in the event."""
    places = [("run", event["run"].get("facets", {})), ("job", event["job"].get("facets", {}))]
    for side in ("inputs", "outputs"):
        for dataset in event.get(side, []):
            where = f"{side}[{dataset['name']}]"
            places.append((where, dataset.get("facets", {})))
            places.append((where, dataset.get("inputFacets", {})))
            places.append((where, dataset.get("outputFacets", {})))
    return [(w, k, f) for w, facets in places for k, f in facets.items()]
