"""durable_nb's notes, kept apart from a cell's own outputs while a notebook runs headless.

A resumed run's output notebook must read as an uninterrupted one's: which cells were restored
is the run's business, not the notebook's. So the notes are taken out of the outputs and
remembered per cell, for the progress display and the log (warnings are never dropped there).
"""

from __future__ import annotations

from typing import Any

from ..notebook.notes import NOTE_KEY, is_note

__all__ = ["NoteSeparator"]


class NoteSeparator:
    """An nbclient client mixin: notes never reach the output notebook; ``notes(i)`` lists cell i's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # By cell, then by display: an update repeats the display's earlier lines.
        self._notes_by_cell: dict[int, dict[str, list[dict[str, str]]]] = {}

    def process_message(self, msg: dict[str, Any], cell: Any, cell_index: int) -> Any:
        """Set a note aside (by its display, since updates repeat the earlier lines); pass the rest on."""
        content = msg.get("content") or {}
        if msg.get("msg_type") in ("display_data", "update_display_data") and is_note(content):
            display = (content.get("transient") or {}).get("display_id") or msg["header"]["msg_id"]
            self._notes_by_cell.setdefault(cell_index, {})[display] = content["metadata"][NOTE_KEY]["notes"]
            return None
        return super().process_message(msg, cell, cell_index)  # type: ignore[misc]

    def notes(self, cell_index: int) -> list[dict[str, str]]:
        """The notes cell ``cell_index`` showed, in order: ``{kind, level, text}`` each."""
        return [note for lines in self._notes_by_cell.get(cell_index, {}).values() for note in lines]
