"""Headless notebooks: any notebook run durably from the command line, resumed after a crash."""

from __future__ import annotations

from .execution import NotebookOutcome, run_notebook

__all__ = ["NotebookOutcome", "run_notebook"]
