"""The records a store reads back: runs, checkpoints and the values they point to.

The records only some calls need (gates and their decisions, status rows, events) live in
``gates`` and ``reports``: a kernel attaching to a run does not define them. Their old names
here still resolve (values pickled before name these classes by this module).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any, TypeVar

from .._lazy import lazy_names
from .status import CheckpointStatus, EventType, RunKind, RunStatus

__all__ = [
    "Blob",
    "CheckpointDraft",
    "CheckpointRecord",
    "CheckpointState",
    "NewEvent",
    "RunRecord",
    "evolve",
]

__getattr__, __dir__ = lazy_names(
    __name__,
    {
        "Decision": "durable_nb.model.gates",
        "PendingInterrupt": "durable_nb.model.gates",
        "EventRecord": "durable_nb.model.reports",
        "StatusRows": "durable_nb.model.reports",
    },
)


@dataclass(frozen=True, slots=True)
class Blob:
    """A serialized value stored once under its content address."""

    hash: str
    codec: str
    data: bytes
    # (key, hex digest of the address form of ``data``) when the store hashed the bytes as it
    # read them: loading then needs no second pass over a large value.
    read_digest: tuple[bytes, str] | None = field(default=None, compare=False, repr=False)
    # Addresses of other blobs this one is made of (a namespace group's array buffers): what
    # keeps this blob alive keeps them alive too.
    parts: tuple[str, ...] = ()
    # A value stored under an unsigned address (before values were signed) loads only with the
    # seal the schema upgrade gave it under the key; values stored since have none.
    seal: str | None = field(default=None, repr=False)

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One row of the runs table."""

    run_id: str
    name: str
    kind: RunKind
    status: RunStatus
    created_at: float
    updated_at: float
    input_manifest: dict[str, str]
    error: str | None = None
    error_type: str | None = None
    idempotency_key: str | None = None
    parent_run_id: str | None = None
    parent_checkpoint_id: str | None = None
    owner: str | None = None
    lease_until: float | None = None
    head_seq: int = 0
    event_seq: int = 0
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CheckpointState:
    """The state of a run at a checkpoint: its values (name to address) and completed nodes.

    ``since_snapshot`` counts the checkpoints since the last one that stored the whole state.
    """

    manifest: dict[str, str]
    completed: list[str]
    since_snapshot: int = 0


@dataclass(frozen=True, slots=True)
class CheckpointDraft:
    """A checkpoint about to be written; the store assigns its seq and time.

    A checkpoint stores what it changed: ``changes`` (name to address, None for a name
    removed) and the nodes it added to or removed from ``completed``. Now and then it also
    carries the whole state (``snapshot``), so that the state at any checkpoint is rebuilt from
    a bounded number of changes (``Store.state_at``).
    """

    checkpoint_id: str
    step: str
    node_id: str | None
    status: CheckpointStatus
    queue: list[str] = field(default_factory=list)
    changes: dict[str, str | None] = field(default_factory=dict)
    completed_added: list[str] = field(default_factory=list)
    completed_removed: list[str] = field(default_factory=list)
    snapshot: CheckpointState | None = None
    skipped: list[str] = field(default_factory=list)
    routes: dict[str, Any] = field(default_factory=dict)
    iteration: int | None = None
    item_index: int | None = None
    branch_key: str | None = None
    parent_checkpoint_id: str | None = None
    node_input: Any = None
    node_output: dict[str, str] | None = None
    error: str | None = None
    error_type: str | None = None
    traceback: str | None = None
    interrupt: dict[str, Any] | None = None
    decision: dict[str, Any] | None = None
    resumes: dict[str, list[Any]] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    agent_path: str | None = None
    duration: float | None = None
    attempts: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointRecord(CheckpointDraft):
    """One immutable row of the checkpoints table: a written draft with its run, seq and time."""

    run_id: str
    seq: int
    created_at: float


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event about to be appended to a run's log."""

    type: EventType
    node_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


R = TypeVar("R")

# Per record class: its field names in order, as a set, and a getter of all their values at once.
_layouts: dict[type, tuple[tuple[str, ...], frozenset[str], attrgetter[Any]]] = {}


def _layout(cls: type) -> tuple[tuple[str, ...], frozenset[str], attrgetter[Any]]:
    layout = _layouts.get(cls)
    if layout is None:
        if any(f.kw_only or not f.init for f in fields(cls)):
            raise TypeError(f"evolve() copies records built from positional fields alone, not {cls.__name__}.")
        names = tuple(f.name for f in fields(cls))
        layout = _layouts[cls] = (names, frozenset(names), attrgetter(*names))
    return layout


def evolve(record: R, **changes: Any) -> R:
    """Return a copy of a record with ``changes``: ``dataclasses.replace`` without its loop in Python
    over the fields (the run row is copied so on every node's commit)."""
    names, known, values = _layout(type(record))
    if not known.issuperset(changes):
        raise TypeError(f"{type(record).__name__} has no field {sorted(set(changes) - known)[0]!r}.")
    return type(record)(*map(changes.get, names, values(record)))
