"""What a finished cell hands to the engine, and what a restored one gives back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...errors import StoreError
from ...model import Blob, CheckpointRecord, NewEvent

__all__ = ["CellOutcome", "HeldOverrides", "Restorable"]


@dataclass(slots=True)
class CellOutcome:
    """What a cell that finished hands over to be committed.

    ``touched`` are the names the cell mentioned or bound; the namespace tracker pickles those
    and whatever shares objects with them. ``bound`` are the names the cell (re)bound: a value
    among them that cannot be stored is reported. ``extra`` rides in the checkpoint as is.
    ``recipe`` tells, for a value that cannot be stored, how the front end can make it again
    (a function's definition): kept in the checkpoint, opaque to the engine. ``settings`` (what
    the cell set in libraries and modules) and ``result`` (the value it showed, kept for ``_``
    and ``Out[n]``) are encoded by the engine with the rest of the commit.
    """

    node_id: str
    namespace: dict[str, Any]
    touched: frozenset[str]
    storable: Callable[[str], bool]
    deleted: list[str]
    outputs: list[dict[str, Any]]
    source_hash: str
    duration: float
    attempts: int = 1
    bound: frozenset[str] = frozenset()
    open_figures: frozenset[int] = frozenset()
    extra: dict[str, Any] = field(default_factory=dict)
    blobs: list[Blob] = field(default_factory=list)
    # Events of the attempts before the one that finished (retries), committed with the cell.
    events: list[NewEvent] = field(default_factory=list)
    recipe: Callable[[str], dict[str, Any] | None] | None = None
    settings: dict[str, Any] | None = None
    result: Any = None


@dataclass(slots=True)
class Restorable:
    """A committed cell, restored: the names it set, its outputs, what it could not store (and why).

    ``overridden`` are its names a later fork set (the fork's value was restored); ``shared``
    maps each of them to the cell's other variables that shared objects with it and keep the
    cell's values.
    """

    checkpoint: CheckpointRecord
    names: list[str]
    outputs: list[dict[str, Any]]
    unstored: dict[str, str]
    reasons: dict[str, str] = field(default_factory=dict)
    overridden: list[str] = field(default_factory=list)
    shared: dict[str, list[str]] = field(default_factory=dict)
    # The cell's settings and shown value, read with its values and decoded only when asked for
    # (after the front end made its definitions again: they may refer to them).
    blobs: dict[str, Blob] = field(default_factory=dict)
    decode: Callable[[Blob], Any] | None = None

    @property
    def source_hash(self) -> str | None:
        return self.checkpoint.extra.get("source_hash")

    def settings(self) -> dict[str, Any]:
        """Return what the cell set in libraries and modules (``settings`` and ``attributes``)."""
        return self._decoded("settings") or {}

    def result(self) -> Any:
        """Return the stored copy of the value the cell showed (None when none was kept)."""
        return self._decoded("result")

    def _decoded(self, key: str) -> Any:
        address = self.checkpoint.extra.get(key)
        if not address or self.decode is None:
            return None
        if address not in self.blobs:
            raise StoreError(f"The store lacks the stored value {address[:14]}…; it was pruned or edited.")
        return self.decode(self.blobs[address])


@dataclass(slots=True)
class HeldOverrides:
    """The values a fork set, checked against the kernel: those put in place, those a plain cell changed."""

    placed: dict[str, Any] = field(default_factory=dict)
    changed: dict[str, Any] = field(default_factory=dict)
