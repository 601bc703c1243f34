"""Notebook rendering of the views: the same DataFrame, with statuses in colour."""

from __future__ import annotations

import html
from typing import Any

from ..model import STATUS_COLOURS

__all__ = ["Styled", "styled"]

COLOURS = STATUS_COLOURS


class Styled:
    """A DataFrame shown with coloured statuses in notebooks and plainly elsewhere (``.frame``)."""

    def __init__(self, frame: Any, title: str | None = None) -> None:
        self.frame = frame
        self.title = title

    def __repr__(self) -> str:
        return repr(self.frame)

    def _repr_html_(self) -> str:
        frame = self.frame.head(200).astype(object)
        # Every cell is escaped (errors can hold any text); only the status gets markup.
        for column in frame.columns:
            frame[column] = [_cell(column, value) for value in frame[column]]
        table = frame.to_html(escape=False, border=0, classes="durable-nb-view")
        caption = f"<div><b>{html.escape(self.title)}</b></div>" if self.title else ""
        return caption + table


def _cell(column: str, value: Any) -> str:
    try:
        missing = value is None or bool(value != value)
    except (TypeError, ValueError):
        missing = False
    if missing or str(value) in ("<NA>", "NaT"):
        return ""
    text = html.escape(str(value))
    if column == "status":
        return f'<b style="color:{COLOURS.get(str(value), "inherit")}">{text}</b>'
    return text


def styled(frame: Any, title: str | None = None) -> Styled:
    """Wrap a view for display in a notebook."""
    return Styled(frame, title)
