"""What a finished cell hands to the engine, and what a restored one gives back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..model import Blob, CheckpointRecord, NewEvent

__all__ = ["CellOutcome", "HeldOverrides", "Restorable"]


@dataclass(slots=True)
class CellOutcome:
    """What a cell that finished hands over to be committed.

    ``touched`` are the names the cell mentioned or bound; the namespace tracker pickles those
    and whatever shares objects with them. ``bound`` are the names the cell (re)bound: a value
    among them that cannot be stored is reported. ``extra`` rides in the checkpoint as is.
    ``recipe`` tells, for a value that cannot be stored, how the front end can make it again
    (a function's definition): kept in the checkpoint, opaque to the engine.
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

    @property
    def source_hash(self) -> str | None:
        return self.checkpoint.extra.get("source_hash")


@dataclass(slots=True)
class HeldOverrides:
    """The values a fork set, checked against the kernel: those put in place, those a plain cell changed."""

    placed: dict[str, Any] = field(default_factory=dict)
    changed: dict[str, Any] = field(default_factory=dict)
