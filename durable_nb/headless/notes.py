"""durable_nb's notes, kept apart from a cell's own outputs while a notebook runs headless.

A resumed run's output notebook must read as an uninterrupted one's: which cells were restored
is the run's business, not the notebook's. So the notes are taken out of the outputs and
remembered per cell, for the progress display and the log (warnings are never dropped there).
"""

from __future__ import annotations

from typing import Any

from ..notebook.notes import NOTE_KEY, is_note

__all__ = ["NoteSeparator", "notes_in"]


def notes_in(msg: dict[str, Any]) -> tuple[str, list[dict[str, str]]] | None:
    """The display a kernel message shows notes in and its notes (``{kind, level, text}`` each), or None.

    An update of the display repeats its earlier lines, so the notes are keyed by the display.
    """
    content = msg.get("content") or {}
    if msg.get("msg_type") not in ("display_data", "update_display_data") or not is_note(content):
        return None
    display = (content.get("transient") or {}).get("display_id") or msg["header"]["msg_id"]
    return display, content["metadata"][NOTE_KEY]["notes"]


class NoteSeparator:
    """An nbclient client mixin: notes never reach the output notebook; ``notes(i)`` lists cell i's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # By cell, then by display: an update repeats the display's earlier lines.
        self._notes_by_cell: dict[int, dict[str, list[dict[str, str]]]] = {}

    def process_message(self, msg: dict[str, Any], cell: Any, cell_index: int) -> Any:
        """Set a note aside; pass the rest on."""
        found = notes_in(msg)
        if found is not None:
            display, notes = found
            self._notes_by_cell.setdefault(cell_index, {})[display] = notes
            return None
        return super().process_message(msg, cell, cell_index)  # type: ignore[misc]

    def notes(self, cell_index: int) -> list[dict[str, str]]:
        """The notes cell ``cell_index`` showed, in order: ``{kind, level, text}`` each."""
        return [note for lines in self._notes_by_cell.get(cell_index, {}).values() for note in lines]
