"""Headless notebooks: any notebook run durably from the command line, resumed after a crash."""

from __future__ import annotations

from .notebook_run import run_notebook

__all__ = ["run_notebook"]
