"""A real headless browser for tests: Debian's Chromium (scripts/install-chromium.sh)."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
# This machine's network is closed: without these, Chromium keeps trying to reach Google.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1280,1600",
    "--virtual-time-budget=10000",  # let the page's scripts run before the capture
)


def render(url: str, screenshot: Path, timeout_s: float = 90) -> str:
    """Load `url`, save a PNG of the page to `screenshot`, return the DOM after scripts ran."""
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        common = [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}"]
        subprocess.run(
            [*common, f"--screenshot={screenshot}", url],
            check=True,
            capture_output=True,
            timeout=timeout_s,
        )
        dom = subprocess.run(
            [*common, "--dump-dom", url],
            check=True,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    return dom.stdout
