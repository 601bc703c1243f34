"""The tags of a notebook's cells, by cell id, read from the notebook file the kernel runs.

JupyterLab sends a cell's id with each execution, not its tags. Without a front end that sends
them (the ``cell-info`` comm message), they are read from the file the kernel was started for
(``__session__`` / ``$JPY_SESSION_NAME``), parsed again only when the file changes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["NotebookTags", "notebook_path"]

# A notebook larger than this (outputs, mostly) is not parsed on a cell's path: its cells have no tags.
_MAX_BYTES = 16 * 1024 * 1024


def notebook_path(namespace: dict[str, Any]) -> Path | None:
    """The notebook file the kernel runs, when the front end said which and it exists."""
    # Jupyter's server names it (ipykernel copies it into __session__); VS Code sets __vsc_ipynb_file__.
    given = namespace.get("__session__") or os.environ.get("JPY_SESSION_NAME") or namespace.get("__vsc_ipynb_file__")
    if not given or not str(given).endswith(".ipynb"):
        return None
    path = Path(str(given))
    # The server names it by its full path; a relative name is read in the kernel's folder.
    for candidate in (path, Path.cwd() / path.name):
        if candidate.is_file():
            return candidate
    return None


def _tags_by_id(path: Path) -> dict[str, list[str]]:
    try:
        with path.open("rb") as file:
            found = json.load(file)
    except (OSError, ValueError):
        return {}
    cells = found.get("cells") if isinstance(found, dict) else None
    tags: dict[str, list[str]] = {}
    for cell in cells if isinstance(cells, list) else []:
        if not isinstance(cell, dict) or not isinstance(cell.get("id"), str):
            continue
        listed = (cell.get("metadata") or {}).get("tags") if isinstance(cell.get("metadata"), dict) else None
        if isinstance(listed, list):
            tags[cell["id"]] = [tag for tag in listed if isinstance(tag, str)]
    return tags


class NotebookTags:
    """Cells' tags from one notebook file, kept until the file changes (size or modification time)."""

    def __init__(self) -> None:
        self._seen: tuple[str, int, int] | None = None
        self._tags: dict[str, list[str]] = {}

    def tags(self, path: Path | None, cell_id: str) -> list[str]:
        """The tags of cell ``cell_id`` in the notebook at ``path`` (none when unreadable)."""
        if path is None:
            return []
        try:
            stat = path.stat()
        except OSError:
            return []
        seen = (str(path), stat.st_mtime_ns, stat.st_size)
        if seen != self._seen:
            self._tags = _tags_by_id(path) if stat.st_size <= _MAX_BYTES else {}
            self._seen = seen
        return list(self._tags.get(cell_id, []))
