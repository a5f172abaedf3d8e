"""Self-contained Data Docs.

Great Expectations' pages load jQuery, Bootstrap and bootstrap-table from public CDNs and
build their tables of results with them: in a closed network, or from a bucket behind a
VPC endpoint, the index renders as an empty page. `lakehouse setup` fetches the same
files, pinned, from the npm registry; every built page then points at copies inside the
site, so it renders wherever it is opened or published.
"""

# ruff: noqa: E501 (CDN addresses are kept whole, to be found by search)
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from lakehouse import PROJECT_ROOT
from lakehouse.core.errors import LakehouseError, explain

ASSETS_DIR = PROJECT_ROOT / ".state" / "data-docs-assets"

# The CDN address each page uses -> (npm package@version, file in the package).
CDN_FILES = {
    "https://code.jquery.com/jquery-3.7.1.min.js": ("jquery@3.7.1", "dist/jquery.min.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js": (
        "popper.js@1.12.9",
        "dist/umd/popper.min.js",
    ),
    "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css": (
        "bootstrap@4.3.1",
        "dist/css/bootstrap.min.css",
    ),
    "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js": (
        "bootstrap@4.3.1",
        "dist/js/bootstrap.min.js",
    ),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.css": (
        "bootstrap-table@1.19.1",
        "dist/bootstrap-table.min.css",
    ),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.js": (
        "bootstrap-table@1.19.1",
        "dist/bootstrap-table.min.js",
    ),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/extensions/filter-control/bootstrap-table-filter-control.min.js": (
        "bootstrap-table@1.19.1",
        "dist/extensions/filter-control/bootstrap-table-filter-control.min.js",
    ),
    # GX asks for 1.19.0 of the filter-control styles; 1.19.1's are the same rules.
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.min.css": (
        "bootstrap-table@1.19.1",
        "dist/extensions/filter-control/bootstrap-table-filter-control.min.css",
    ),
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.css": (
        "bootstrap-table@1.19.1",
        "dist/extensions/filter-control/bootstrap-table-filter-control.css",
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/bootstrap-datepicker.min.css": (
        "bootstrap-datepicker@1.9.0",
        "dist/css/bootstrap-datepicker.min.css",
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/bootstrap-datepicker.min.js": (
        "bootstrap-datepicker@1.9.0",
        "dist/js/bootstrap-datepicker.min.js",
    ),
    "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css": (
        "@forevolve/bootstrap-dark@1.1.0",
        "dist/css/bootstrap-prefers-dark.css",
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css": (
        "@fortawesome/fontawesome-free@6.6.0",
        "css/all.min.css",
    ),
    "https://cdn.jsdelivr.net/npm/vega@5": ("vega@5.33.1", "build/vega.min.js"),
    "https://cdn.jsdelivr.net/npm/vega-lite@5": ("vega-lite@5.23.0", "build/vega-lite.min.js"),
    "https://cdn.jsdelivr.net/npm/vega-embed@6": ("vega-embed@6.29.0", "build/vega-embed.min.js"),
}
# Folders a style sheet reaches by relative URL (Font Awesome's ../webfonts/).
EXTRA_DIRS = {"@fortawesome/fontawesome-free@6.6.0": ("webfonts",)}
# GX's logo comes from its own bucket with the context id in the query string.
_REMOTE_LOGO = re.compile(r'src="https://great-expectations-web-assets\.s3[^"]*"')


def _digest() -> str:
    return hashlib.sha256(json.dumps([CDN_FILES, EXTRA_DIRS], sort_keys=True).encode()).hexdigest()


def fetch_assets(force: bool = False) -> Path:
    """Fetch the pinned packages once (`npm pack`) and keep the files the pages use."""
    stamp = ASSETS_DIR / ".sha256"
    if not force and stamp.exists() and stamp.read_text() == _digest():
        return ASSETS_DIR
    npm = shutil.which("npm")
    if npm is None:
        raise LakehouseError("npm is needed once to fetch the Data Docs scripts and styles")
    packages = sorted({package for package, _ in CDN_FILES.values()})
    shutil.rmtree(ASSETS_DIR, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="data-docs-") as tmp:
        result = subprocess.run(
            [npm, "pack", "--silent", "--json", "--pack-destination", tmp, *packages],
            capture_output=True,
            text=True,
            cwd=tmp,
        )
        if result.returncode != 0:
            raise LakehouseError(f"npm pack failed: {explain(result.stderr)}")
        tarballs = {f"{p['name']}@{p['version']}": p["filename"] for p in json.loads(result.stdout)}
        for package in packages:
            wanted = [f for p, f in CDN_FILES.values() if p == package]
            folders = EXTRA_DIRS.get(package, ())
            with tarfile.open(Path(tmp) / tarballs[package]) as archive:
                for member in archive.getmembers():
                    inner = member.name.removeprefix("package/")
                    if member.isfile() and (inner in wanted or inner.split("/", 1)[0] in folders):
                        target = ASSETS_DIR / _folder(package) / inner
                        target.parent.mkdir(parents=True, exist_ok=True)
                        source = archive.extractfile(member)
                        assert source is not None
                        target.write_bytes(source.read())
    stamp.write_text(_digest())
    return ASSETS_DIR


def make_self_contained(site: Path) -> int:
    """Copy the assets into `site/static/vendor` and point every page at them; the number
    of pages rewritten."""
    if not (ASSETS_DIR / ".sha256").exists():
        raise LakehouseError(
            f"Data Docs scripts and styles are missing from {ASSETS_DIR}: run `lakehouse setup`"
        )
    vendor = site / "static" / "vendor"
    shutil.rmtree(vendor, ignore_errors=True)
    shutil.copytree(ASSETS_DIR, vendor, ignore=shutil.ignore_patterns(".sha256"))
    pages = 0
    for page in site.rglob("*.html"):
        html = page.read_text()
        for url, (package, file) in CDN_FILES.items():
            local = os.path.relpath(vendor / _folder(package) / file, page.parent)
            html = html.replace(f'"{url}"', f'"{local}"')
        logo = os.path.relpath(site / "static" / "images" / "logo-long-vector.svg", page.parent)
        html = _REMOTE_LOGO.sub(f'src="{logo}"', html)
        page.write_text(html)
        pages += 1
    return pages


def _folder(package: str) -> str:
    """`@scope/name@1.2.3` -> `scope-name-1.2.3`: one flat folder per pinned package."""
    name, _, version = package.lstrip("@").rpartition("@")
    return f"{name.replace('/', '-')}-{version}"


def link_from_index(site: Path, page: str, label: str) -> None:
    """Link the project's `page` (relative to `site`) from the top of the Data Docs index,
    once, after the links added before it."""
    index = site / "index.html"
    if not index.is_file():
        return
    text = index.read_text()
    mark = f"data-lakehouse-link='{page}'"
    if mark in text:
        return
    link = (
        f"<div {mark} style='padding:.5em 1em;font-family:sans-serif'>"
        f"<a href='{page}'>{label}</a></div>"
    )
    # After the body's opening tag and any links already there, so that they keep the
    # order in which the report wrote the pages.
    after = re.compile(r"<body[^>]*>(?:<div data-lakehouse-link=[^>]*>.*?</div>)*", re.S)
    index.write_text(after.sub(lambda m: m[0] + link, text, count=1))
