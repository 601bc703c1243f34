"""How far a ``map_items`` call in a cell has got: one bar per map, updated in place.

The bar is a note (it carries the notes' metadata key), so headless runs tell it from the
cell's own outputs, and it bypasses the cell's output capture: a restored cell replays what
the cell printed and showed, not a thousand progress updates.
"""

from __future__ import annotations

import html
import time
import uuid
from typing import Any

from IPython.core.displaypub import DisplayPublisher

from .notes import NOTE_KEY

__all__ = ["MapProgress"]

# Updates closer together than this are skipped (the final one never is): a front end need not
# redraw a bar a thousand times a second.
_EVERY_SECONDS = 0.2
_STYLE = (
    "font-family:var(--jp-ui-font-family,sans-serif);font-size:var(--jp-ui-font-size0,11px);"
    "color:var(--jp-ui-font-color2,#616161);padding:1px 0 1px 8px;"
    "border-left:2px solid var(--jp-border-color2,#e0e0e0)"
)


def describe(name: str, done: int, total: int, restored: int, failed: int) -> str:
    """The progress line of one map: items done of all, and how many came back from the store."""
    text = f"map '{name}': {done}/{total} items committed"
    details = []
    if restored:
        details.append(f"{restored} restored from the store")
    if failed:
        details.append(f"{failed} failed")
    return f"{text} ({', '.join(details)})" if details else text


class MapProgress:
    """The progress bars of the cell running now, one per map name."""

    def __init__(self, shell: Any, enabled: bool = True) -> None:
        self.shell = shell
        self.enabled = enabled
        self._displays: dict[str, str] = {}
        self._last: dict[str, float] = {}

    def __call__(self, name: str, done: int, total: int, restored: int, failed: int, final: bool = False) -> None:
        """Show (or update) the bar of map ``name``."""
        if not self.enabled:
            return
        now = time.monotonic()
        first = name not in self._displays
        if not (first or final or now - self._last.get(name, 0.0) >= _EVERY_SECONDS):
            return
        self._last[name] = now
        text = describe(name, done, total, restored, failed)
        data = {
            "text/plain": f"durable_nb: {text}",
            "text/html": (
                f'<div class="durable-nb-progress" style="{_STYLE}">'
                f'<progress value="{done}" max="{max(total, 1)}" style="width:12em;vertical-align:middle"></progress> '
                f"{html.escape(text)}</div>"
            ),
        }
        meta = {NOTE_KEY: {"notes": [{"kind": "progress", "level": "info", "text": text}]}}
        publisher = self.shell.display_pub
        if type(publisher) is DisplayPublisher and not final:
            return  # a terminal prints every update as a new line: show only the last
        if first:
            self._displays[name] = uuid.uuid4().hex
        # The class's own publish: the cell's capture wraps the instance's (see the module docstring).
        type(publisher).publish(publisher, data, meta, transient={"display_id": self._displays[name]}, update=not first)
