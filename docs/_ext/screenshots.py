"""Where the docs take a screenshot from; apart from the Sphinx directives, so tests can ask without Sphinx."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DOCS", "screenshot_path"]

DOCS = Path(__file__).resolve().parent.parent


def screenshot_path(name: str) -> Path:
    """Where the screenshot ``name`` is taken from: the browser tests' folder, else the tracked copy."""
    folders = [Path(p) for p in (os.environ.get("DURABLE_NB_SCREENSHOTS"),) if p]
    folders += [DOCS / "_build" / "screenshots", DOCS]
    return next((f / f"{name}.png" for f in folders if (f / f"{name}.png").is_file()), DOCS / f"{name}.png")
