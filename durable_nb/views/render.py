"""Notebook rendering of the views: the same DataFrame, with statuses in colour."""

from __future__ import annotations

import html
from typing import Any

__all__ = ["Styled", "styled"]

COLOURS = {
    "completed": "#16a34a",
    "ok": "#16a34a",
    "approved": "#16a34a",
    "running": "#2563eb",
    "pending": "#6b7280",
    "fork": "#7c3aed",
    "paused": "#d97706",
    "interrupted": "#d97706",
    "failed": "#dc2626",
    "cancelled": "#6b7280",
}


class Styled:
    """A DataFrame shown with coloured statuses in notebooks and plainly elsewhere (``.frame``)."""

    def __init__(self, frame: Any, title: str | None = None) -> None:
        self.frame = frame
        self.title = title

    def __repr__(self) -> str:
        return repr(self.frame)

    def _repr_html_(self) -> str:
        frame = self.frame.copy()
        if "status" in frame.columns:
            frame["status"] = [
                f'<b style="color:{COLOURS.get(str(v), "inherit")}">{html.escape(str(v))}</b>' for v in frame["status"]
            ]
        table = frame.to_html(escape=False, na_rep="", max_rows=200, border=0, classes="durable-nb-view")
        caption = f"<div><b>{html.escape(self.title)}</b></div>" if self.title else ""
        return caption + table


def styled(frame: Any, title: str | None = None) -> Styled:
    """Wrap a view for display in a notebook."""
    return Styled(frame, title)
