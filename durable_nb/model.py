"""The data model shared by the store and the engine: plain records, no behaviour."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "Blob",
    "CheckpointDraft",
    "CheckpointRecord",
    "CheckpointState",
    "CheckpointStatus",
    "Commit",
    "CommitResult",
    "Decision",
    "EventRecord",
    "EventType",
    "NewEvent",
    "NewRun",
    "PendingInterrupt",
    "PruneReport",
    "RunKind",
    "RunRecord",
    "RunStatus",
    "RunUpdate",
    "STATUS_COLOURS",
    "StatusRows",
    "UNCHANGED",
    "format_seconds",
    "step_name",
]


class RunStatus(enum.StrEnum):
    """Lifecycle of a run."""

    PENDING = "pending"
    RUNNING = "running"
    PAUSED = "paused"
    FAILED = "failed"
    CANCELLED = "cancelled"
    COMPLETED = "completed"


class RunKind(enum.StrEnum):
    """What drives a run: a notebook kernel or a Workflow."""

    NOTEBOOK = "notebook"
    WORKFLOW = "workflow"


class CheckpointStatus(enum.StrEnum):
    """What a checkpoint records about its node."""

    OK = "ok"
    INTERRUPTED = "interrupted"
    FAILED = "failed"
    APPROVED = "approved"
    FORK = "fork"
    COMPLETED = "completed"


class EventType(enum.StrEnum):
    """What an event in a run's log reports; the order is the order of a run's life."""

    RUN_STARTED = "run_started"
    NODE_STARTED = "node_started"
    NODE_FINISHED = "node_finished"
    NODE_FAILED = "node_failed"
    NODE_RETRYING = "node_retrying"
    GATE_OPENED = "gate_opened"
    GATE_DECIDED = "gate_decided"
    RUN_PAUSED = "run_paused"
    RUN_FAILED = "run_failed"
    RUN_CANCELLED = "run_cancelled"
    RUN_COMPLETED = "run_completed"
    FORK_CREATED = "fork_created"


# How statuses (of runs and of checkpoints) are coloured wherever they are shown.
STATUS_COLOURS = {
    "completed": "#16a34a",
    "ok": "#16a34a",
    "approved": "#16a34a",
    "running": "#2563eb",
    "pending": "#6b7280",
    "fork": "#7c3aed",
    "paused": "#d97706",
    "interrupted": "#d97706",
    "failed": "#dc2626",
    "cancelled": "#6b7280",
}

RUN_END = "run_end"


def format_seconds(seconds: float, *, compound: bool = False) -> str:
    """Return a duration for messages: ``12 ms``, ``0.5 s``, ``90 s``, ``45 min``, ``5 h``, ``21 days``.

    ``compound=True`` gives the form for tables, three significant digits below a minute and
    two units above: ``340 ms``, ``1.52 s``, ``2 min 05 s``, ``1 h 02 min``, ``3 d 4 h``.
    """
    if compound:
        return _compound_seconds(seconds)
    for unit, size, floor in (("days", 86400, 172800), ("h", 3600, 7200), ("min", 60, 120)):
        if seconds >= floor:
            return f"{round(seconds / size, 2):g} {unit}"
    if 0 < seconds < 0.1:
        return f"{seconds * 1000:.2g} ms"
    return f"{round(seconds, 3):g} s"


def _compound_seconds(seconds: float) -> str:
    if seconds < 0:
        return "-" + _compound_seconds(-seconds)
    seconds = round(seconds, 6)  # below a microsecond is clock noise, and would print as 1e-05 ms
    if seconds == 0:
        return "0 s"
    # The limits are where three significant digits would round up into the next unit.
    if seconds < 0.9995:
        return f"{seconds * 1000:.3g} ms"
    if seconds < 59.95:
        return f"{seconds:.3g} s"
    # Each form rounds in its smaller unit first, so 59 min 59.7 s reads 1 h 00 min, never 60 min 00 s.
    if (whole := round(seconds)) < 3600:
        return "{} min {:02d} s".format(*divmod(whole, 60))
    if (whole := round(seconds / 60)) < 1440:
        return "{} h {:02d} min".format(*divmod(whole, 60))
    return "{} d {} h".format(*divmod(round(seconds / 3600), 24))


def step_name(kind: str, node_id: str | None = None) -> str:
    """Build a step name such as ``after:classify`` or ``run_end``."""
    if kind == RUN_END:
        return RUN_END
    return f"{kind}:{node_id}"


class _Unchanged:
    """Marker for a run field a commit leaves as it is."""

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED: Any = _Unchanged()


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
class Decision:
    """A recorded answer to a gate: who decided what, when, and why."""

    approved: bool
    value: Any = None
    comment: str | None = None
    by: str | None = None
    at: datetime = field(default_factory=lambda: datetime.now(UTC))

    def to_json(self) -> dict[str, Any]:
        """Return the JSON form stored in checkpoints."""
        return {
            "approved": self.approved,
            "value": self.value,
            "comment": self.comment,
            "by": self.by,
            "at": self.at.isoformat(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Decision:
        """Rebuild a decision from its stored JSON form."""
        return cls(
            approved=bool(data["approved"]),
            value=data.get("value"),
            comment=data.get("comment"),
            by=data.get("by"),
            at=datetime.fromisoformat(data["at"]),
        )


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
class StatusRows:
    """What a run's status is made of, read in one call: each checkpoint's step and address
    (step, node, branch, iteration, item), the queue at the resume point, the latest skipped
    nodes, and the completed ones."""

    steps: list[tuple[str, str | None, str | None, int | None, int | None]]
    queue: list[str]
    skipped: list[str]
    completed: list[str]


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


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One row of a run's event log, numbered per run without gaps."""

    run_id: str
    seq: int
    type: str
    node_id: str | None
    at: float
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class PendingInterrupt:
    """A gate waiting for a decision; claimed (deleted) exactly once."""

    run_id: str
    node_id: str
    checkpoint_id: str
    reason: str
    context: Any
    created_at: float
    agent_path: str | None = None
    expires_at: float | None = None
    on_timeout: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """Return what a caller sees of a pending gate: reason, context, node and agent path."""
        return {
            "reason": self.reason,
            "context": self.context,
            "node_id": self.node_id,
            "agent_path": self.agent_path,
        }


@dataclass(frozen=True, slots=True)
class NewRun:
    """A run about to be created, with the blobs of its input."""

    run_id: str
    name: str
    kind: RunKind
    status: RunStatus
    input_manifest: dict[str, str]
    blobs: list[Blob] = field(default_factory=list)
    idempotency_key: str | None = None
    parent_run_id: str | None = None
    parent_checkpoint_id: str | None = None
    owner: str | None = None
    lease_until: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    checkpoints: list[CheckpointDraft] = field(default_factory=list)
    events: list[NewEvent] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RunUpdate:
    """Changes to a run row that ride in a commit; UNCHANGED fields stay."""

    status: Any = UNCHANGED
    error: Any = UNCHANGED
    error_type: Any = UNCHANGED
    owner: Any = UNCHANGED
    lease_until: Any = UNCHANGED


@dataclass(frozen=True, slots=True)
class Commit:
    """Everything one transaction writes for a run.

    The checks run first inside the transaction: when one fails, nothing is written.
    ``claim`` deletes a pending interrupt (a node id, or ``"*"`` for the only one), and with
    ``claim_gate`` only the one that gate checkpoint opened; finding none raises AlreadyResumed.
    When no other interrupt stays pending, the run takes ``status_after_claim`` (and the owner
    in ``run``); otherwise it stays paused, unowned.
    ``release_interrupts`` deletes every pending interrupt of the run (cancel, failed gate).
    ``expect_owner`` (UNCHANGED: no check) and ``expect_head_seq`` guard against a run that
    moved on since the caller read it. ``seen`` is the run row as the caller last saw it: while
    the stored row still matches it, a backend may update the row without reading it first.
    """

    run_id: str
    checkpoints: list[CheckpointDraft] = field(default_factory=list)
    blobs: list[Blob] = field(default_factory=list)
    events: list[NewEvent] = field(default_factory=list)
    run: RunUpdate | None = None
    open_interrupts: list[PendingInterrupt] = field(default_factory=list)
    claim: str | None = None
    claim_gate: str | None = None
    release_interrupts: bool = False
    status_after_claim: RunStatus | None = None
    expect_status: frozenset[RunStatus] | None = None
    expect_owner: Any = UNCHANGED
    expect_head_seq: int | None = None
    idempotent: list[tuple[str, str]] = field(default_factory=list)
    seen: RunRecord | None = None


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What a commit wrote: its checkpoints with their seqs, and any claimed interrupt."""

    run: RunRecord
    checkpoints: list[CheckpointRecord]
    claimed: PendingInterrupt | None = None


@dataclass(frozen=True, slots=True)
class PruneReport:
    """What prune() deleted."""

    checkpoints: int = 0
    events: int = 0
    idempotency: int = 0
    blobs: int = 0
    bytes_freed: int = 0
