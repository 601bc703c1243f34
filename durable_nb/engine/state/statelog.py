"""A run's state as the engine holds it while it works, and what changed since the last checkpoint.

Each checkpoint stores what changed; this is where the changes are gathered, so that a commit
costs what the node changed, not the size of the state. When enough checkpoints have passed
since the last whole state was stored, the next checkpoint carries a snapshot as well.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ...model import CheckpointState
from ...store.state import snapshot_due

__all__ = ["StateLog"]


class StateLog:
    """The values (name to address) and completed nodes of a run, with their pending changes."""

    def __init__(self, state: CheckpointState) -> None:
        self.manifest: dict[str, str] = dict(state.manifest)
        self._completed: dict[str, None] = dict.fromkeys(state.completed)
        self._since_snapshot = state.since_snapshot
        self._changes: dict[str, str | None] = {}
        self._added: dict[str, None] = {}

    @property
    def completed(self) -> list[str]:
        """The completed nodes, in the order they completed."""
        return list(self._completed)

    @property
    def done(self) -> Any:
        """The completed nodes as a read-only view (no copy)."""
        return self._completed.keys()

    def update(self, changes: Mapping[str, str]) -> None:
        """Set values (name to address)."""
        for name, address in changes.items():
            self.manifest[name] = address
            self._changes[name] = address

    def remove(self, names: Iterable[str]) -> None:
        """Remove values."""
        for name in names:
            if self.manifest.pop(name, None) is not None:
                self._changes[name] = None

    def complete(self, node: str) -> None:
        """Record that a node completed (again: it moves to the end)."""
        self._completed.pop(node, None)
        self._completed[node] = None
        self._added.pop(node, None)
        self._added[node] = None

    def draft_fields(self) -> dict[str, Any]:
        """Take the changes since the last checkpoint as a draft's fields (with a snapshot when due)."""
        fields: dict[str, Any] = {"changes": self._changes, "completed_added": list(self._added)}
        self._changes, self._added = {}, {}
        self._since_snapshot += 1
        if snapshot_due(self._since_snapshot, len(self.manifest) + len(self._completed)):
            fields["snapshot"] = CheckpointState(dict(self.manifest), list(self._completed))
            self._since_snapshot = 0
        return fields
