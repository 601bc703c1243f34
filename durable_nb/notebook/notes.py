"""How durable_nb speaks in a notebook: one quiet note per cell, never an error box.

A note is display data, not stderr (JupyterLab draws stderr as an error). It carries a small
styled HTML line for front ends that render it, the same words as plain text for terminals and
logs, and a ``durable_nb`` metadata entry so that tools (``run-notebook``, the papermill engine)
can tell notes from the cell's own outputs. The notes of one cell share one display, updated as
lines are added. Informational notes can be silenced; warnings (a value not stored, a setting
not re-applied) always show, since hiding them would let a restore be wrong silently.
"""

# Annotations evaluated, not strings: the named tuples below keep them as their fields' types.

import html
import uuid
from typing import Any, Literal

from .._tuples import Typed

__all__ = ["NOTE_KEY", "Note", "Notes", "is_note", "note_kinds"]

NOTE_KEY = "durable_nb"
Level = Literal["info", "warning"]

_LINE_STYLE = {
    "info": "color:var(--jp-ui-font-color2,#616161)",
    "warning": "color:var(--jp-warn-color0,#b45309)",
}
_BOX_STYLE = (
    "font-family:var(--jp-ui-font-family,sans-serif);font-size:var(--jp-ui-font-size0,11px);"
    "line-height:1.5;padding:1px 0 1px 8px;border-left:2px solid var(--jp-border-color2,#e0e0e0)"
)
_LABEL_STYLE = "font-weight:600;margin-right:6px"


class Note(Typed):
    """One line durable_nb says about a cell: what it is about (``kind``) and how loud it is."""

    text: str
    kind: str = "info"
    level: Level = "info"


def is_note(output: dict[str, Any]) -> bool:
    """True if a notebook output (or message content) is one of durable_nb's notes."""
    return NOTE_KEY in (output.get("metadata") or {})


def note_kinds(output: dict[str, Any]) -> list[str]:
    """The kinds of the notes a note output holds (``restored``, ``forked`` …)."""
    entry = (output.get("metadata") or {}).get(NOTE_KEY) or {}
    return [str(note.get("kind")) for note in entry.get("notes", [])]


def _bundle(notes: list[Note]) -> tuple[dict[str, str], dict[str, Any]]:
    plain = "\n".join(f"durable_nb: {note.text}" for note in notes)
    lines = "".join(
        f'<div style="{_LINE_STYLE[note.level]}"><span style="{_LABEL_STYLE}">durable_nb</span>'
        f"{html.escape(note.text)}</div>"
        for note in notes
    )
    data = {"text/plain": plain, "text/html": f'<div class="durable-nb-note" style="{_BOX_STYLE}">{lines}</div>'}
    meta = {NOTE_KEY: {"notes": [{"kind": n.kind, "level": n.level, "text": n.text} for n in notes]}}
    return data, meta


class Notes:
    """The notes of the cell running now, shown in one display that grows as lines are added."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.enabled = True
        self._lines: list[Note] = []
        self._display_id: str | None = None

    def new_cell(self, *_info: Any) -> None:
        """Start a new cell's display (an IPython ``pre_run_cell`` callback)."""
        self._lines = []
        self._display_id = None

    def say(self, text: str, kind: str = "info", *, always: bool = False) -> None:
        """Show an informational note, unless notes are switched off (``always``: whatever the setting)."""
        if self.enabled or always:
            self._show(Note(text, kind))

    def warn(self, text: str, kind: str = "warning") -> None:
        """Show a warning: always, whatever the setting."""
        self._show(Note(text, kind, "warning"))

    def _show(self, note: Note) -> None:
        from IPython.core.displaypub import DisplayPublisher

        publisher = self.shell.display_pub
        self._lines.append(note)
        if type(publisher) is DisplayPublisher:
            # IPython's plain publisher (a terminal) prints every display: show each line once.
            data, meta = _bundle([note])
            publisher.publish(data, meta)
            return
        data, meta = _bundle(self._lines)
        update = self._display_id is not None
        if not update:
            self._display_id = uuid.uuid4().hex
        publisher.publish(data, meta, transient={"display_id": self._display_id}, update=update)
