"""Terminal rendering of the views: durations and times as the notebook shows them, in plain text.

A terminal table of a view reads ``1.52 s`` or ``2 min 05 s`` and local times to the second,
as the notebook's tables do, instead of pandas' ``0 days 00:00:00.016291432``. Ids stay whole:
in a terminal they are there to be copied.
"""

from __future__ import annotations

from typing import Any

from ..model import format_seconds
from .render import local_time

__all__ = ["human_frame"]


def human_frame(frame: Any) -> Any:
    """Return ``frame`` with durations and times as people read them and missing values empty, as text."""
    shown = frame.astype(object)
    for position, column in enumerate(frame.columns):
        kind = getattr(frame[column].dtype, "kind", "O")
        show = _duration if kind == "m" else local_time if kind == "M" else None
        if show is not None:
            shown.isetitem(position, [v if _missing(v) else show(v) for v in frame[column]])
    # As the notebook's tables: nothing where there is no value (not <NA>, NaN or NaT).
    return shown.where(frame.notna(), "")


def _duration(value: Any) -> str:
    return format_seconds(value.total_seconds(), compound=True)


def _missing(value: Any) -> bool:
    return value is None or value != value
