"""Headless Chromium for the browser tests: Debian's chromium, driven by Playwright."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["CHROMIUM", "SCREENSHOTS_ENV", "chromium", "require_browser", "screenshot_path"]

# The folder screenshots go to when set (docs/refresh-screenshots sets it to docs/); else each
# test's own temporary folder, so that the suite never changes a tracked file.
SCREENSHOTS_ENV = "DURABLE_NB_SCREENSHOTS"

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def require_browser(*needs: str) -> None:
    """Skip the calling test or fixture unless Chromium, Playwright and the modules ``needs`` are here."""
    import pytest

    if CHROMIUM is None:
        pytest.skip("browser tests need Debian's chromium (apt-get install chromium); .ci/run installs it")
    pytest.importorskip("playwright", reason="browser tests need Playwright for Python (pip install playwright)")
    for module in needs:
        pytest.importorskip(module, reason=f"this browser test needs {module} (pip install {module})")


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium browser (closed on exit)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def screenshot_path(folder: Path, name: str) -> str:
    """Where a test saves the screenshot ``name``: ``$DURABLE_NB_SCREENSHOTS`` when set, else ``folder``."""
    chosen = Path(os.environ.get(SCREENSHOTS_ENV) or folder)
    chosen.mkdir(parents=True, exist_ok=True)
    return str(chosen / name)
