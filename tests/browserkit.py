"""Headless Chromium for the browser tests: Debian's chromium, driven by Playwright."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from typing import Any

__all__ = ["CHROMIUM", "chromium"]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


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
