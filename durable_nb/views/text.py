"""Terminal rendering of the views: durations and times as the notebook shows them, in plain text.

A terminal table of a view reads ``1.52 s`` or ``2 min 05 s`` and local times to the second,
as the notebook's tables do, instead of pandas' ``0 days 00:00:00.016291432``. Ids stay whole:
in a terminal they are there to be copied.
"""

from __future__ import annotations

from typing import Any

from .render import checkpoint_labels, human_duration, is_history, local_text

__all__ = ["human_frame"]


def human_frame(frame: Any, columns: list[str] | None = None) -> Any:
    """Return ``frame`` (its ``columns``, default all) as text people read: durations, local times,
    a gate checkpoint's state, and missing values empty."""
    shown = frame.astype(object)
    for position, column in enumerate(frame.columns):
        kind = getattr(frame[column].dtype, "kind", "O")
        show = human_duration if kind == "m" else local_text if kind == "M" else None
        if show is not None:
            shown.isetitem(position, [show(v) for v in frame[column]])
    shown = shown.where(frame.notna(), "")  # as the notebook's tables: nothing for NA, NaN or NaT
    if is_history(frame):
        # A gate's checkpoint reads waiting for a decision or decided, as in the notebook's history.
        shown.isetitem(list(frame.columns).index("status"), checkpoint_labels(frame))
    return shown if columns is None else shown[columns]
