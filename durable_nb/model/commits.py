"""What a caller hands the store to write (a new run, a commit and its checks) and what a
commit returns. (What a prune deleted is a report: ``reports.PruneReport``, still found here.)

The records' annotations are evaluated, not kept as text: dataclasses parses a text annotation
twice per field (is it a ClassVar, an InitVar?), a tenth of what defining them cost a kernel.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._lazy import lazy_names
from .._tuples import Typed
from .records import Blob, CheckpointDraft, CheckpointRecord, NewEvent, Record, RunRecord, quick_init
from .status import RunKind, RunStatus

if TYPE_CHECKING:
    from .gates import PendingInterrupt

__all__ = ["Commit", "CommitResult", "NewRun", "RunUpdate", "UNCHANGED", "WriteRow"]

__getattr__, __dir__ = lazy_names(__name__, {"PruneReport": "durable_nb.model.reports"})


class _Unchanged:
    """Marker for a run field a commit leaves as it is."""

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED: Any = _Unchanged()


@quick_init
@dataclass(repr=False, eq=False, slots=True, init=False)
class NewRun(Record):
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


class WriteRow(Typed):
    """A task's pending write as a run stores it: under a checkpoint, its value by address,
    ``mac`` signing the fields; of writes with a negative ``idx`` the latest (``stamp``) is kept."""

    checkpoint_id: str
    task_id: str
    idx: int
    channel: str
    task_path: str
    value_hash: str
    stamp: int
    mac: str


@quick_init
@dataclass(repr=False, eq=False, slots=True, init=False)
class RunUpdate(Record):
    """Changes to a run row that ride in a commit; UNCHANGED fields stay."""

    status: Any = UNCHANGED
    error: Any = UNCHANGED
    error_type: Any = UNCHANGED
    owner: Any = UNCHANGED
    lease_until: Any = UNCHANGED


@quick_init
@dataclass(repr=False, eq=False, slots=True, init=False)
class Commit(Record):
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
    ``writes`` are pending writes; a commit of writes alone (with ``seen``) leaves the run row
    as it is: it checks only that the run exists.
    """

    run_id: str
    checkpoints: list[CheckpointDraft] = field(default_factory=list)
    blobs: list[Blob] = field(default_factory=list)
    events: list[NewEvent] = field(default_factory=list)
    run: RunUpdate | None = None
    open_interrupts: list["PendingInterrupt"] = field(default_factory=list)
    claim: str | None = None
    claim_gate: str | None = None
    release_interrupts: bool = False
    status_after_claim: RunStatus | None = None
    expect_status: frozenset[RunStatus] | None = None
    expect_owner: Any = UNCHANGED
    expect_head_seq: int | None = None
    idempotent: list[tuple[str, str]] = field(default_factory=list)
    seen: RunRecord | None = None
    writes: list[WriteRow] = field(default_factory=list)


@quick_init
@dataclass(repr=False, eq=False, slots=True, init=False)
class CommitResult(Record):
    """What a commit wrote: its checkpoints with their seqs (a sequence, perhaps built as it is
    read), and any claimed interrupt."""

    run: RunRecord
    checkpoints: Sequence[CheckpointRecord]
    claimed: "PendingInterrupt | None" = None
