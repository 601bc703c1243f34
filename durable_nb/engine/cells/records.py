"""What a finished cell hands to the engine, and what a restored one gives back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...errors import StoreError
from ...model import Blob, CheckpointRecord, NewEvent

__all__ = ["CellOutcome", "HeldOverrides", "Restorable"]


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
    attempts: int
    bound: frozenset[str]
    open_figures: frozenset[int]
    extra: dict[str, Any]
    blobs: list[Blob]
    # Events of the attempts before the one that finished (retries), committed with the cell.
    events: list[NewEvent]
    recipe: Callable[[str], dict[str, Any] | None] | None
    settings: dict[str, Any] | None
    result: Any

    __slots__ = (
        "attempts",
        "blobs",
        "bound",
        "deleted",
        "duration",
        "events",
        "extra",
        "namespace",
        "node_id",
        "open_figures",
        "outputs",
        "recipe",
        "result",
        "settings",
        "source_hash",
        "storable",
        "touched",
    )

    def __init__(
        self,
        node_id: str,
        namespace: dict[str, Any],
        touched: frozenset[str],
        storable: Callable[[str], bool],
        deleted: list[str],
        outputs: list[dict[str, Any]],
        source_hash: str,
        duration: float,
        attempts: int = 1,
        bound: frozenset[str] = frozenset(),
        open_figures: frozenset[int] = frozenset(),
        extra: dict[str, Any] | None = None,
        blobs: list[Blob] | None = None,
        events: list[NewEvent] | None = None,
        recipe: Callable[[str], dict[str, Any] | None] | None = None,
        settings: dict[str, Any] | None = None,
        result: Any = None,
    ) -> None:
        self.node_id = node_id
        self.namespace = namespace
        self.touched = touched
        self.storable = storable
        self.deleted = deleted
        self.outputs = outputs
        self.source_hash = source_hash
        self.duration = duration
        self.attempts = attempts
        self.bound = bound
        self.open_figures = open_figures
        self.extra = {} if extra is None else extra
        self.blobs = [] if blobs is None else blobs
        self.events = [] if events is None else events
        self.recipe = recipe
        self.settings = settings
        self.result = result


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
    reasons: dict[str, str]
    overridden: list[str]
    shared: dict[str, list[str]]
    # The cell's settings and shown value, read with its values and decoded only when asked for
    # (after the front end made its definitions again: they may refer to them).
    blobs: dict[str, Blob]
    decode: Callable[[Blob], Any] | None

    __slots__ = ("blobs", "checkpoint", "decode", "names", "outputs", "overridden", "reasons", "shared", "unstored")

    def __init__(
        self,
        checkpoint: CheckpointRecord,
        names: list[str],
        outputs: list[dict[str, Any]],
        unstored: dict[str, str],
        reasons: dict[str, str] | None = None,
        overridden: list[str] | None = None,
        shared: dict[str, list[str]] | None = None,
        blobs: dict[str, Blob] | None = None,
        decode: Callable[[Blob], Any] | None = None,
    ) -> None:
        self.checkpoint = checkpoint
        self.names = names
        self.outputs = outputs
        self.unstored = unstored
        self.reasons = {} if reasons is None else reasons
        self.overridden = [] if overridden is None else overridden
        self.shared = {} if shared is None else shared
        self.blobs = {} if blobs is None else blobs
        self.decode = decode

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


class HeldOverrides:
    """The values a fork set, checked against the kernel: those put in place, those a plain cell changed."""

    placed: dict[str, Any]
    changed: dict[str, Any]

    __slots__ = ("changed", "placed")

    def __init__(self, placed: dict[str, Any] | None = None, changed: dict[str, Any] | None = None) -> None:
        self.placed = {} if placed is None else placed
        self.changed = {} if changed is None else changed
