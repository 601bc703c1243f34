"""The data model shared by the store and the engine: plain records, no behaviour.

``status`` holds what runs, checkpoints and events can be; ``records`` the rows a store reads
back; ``commits`` what a caller hands the store to write and what the writes return.
"""

from __future__ import annotations

from .commits import UNCHANGED, Commit, CommitResult, NewRun, PruneReport, RunUpdate
from .records import (
    Blob,
    CheckpointDraft,
    CheckpointRecord,
    CheckpointState,
    Decision,
    EventRecord,
    NewEvent,
    PendingInterrupt,
    RunRecord,
    StatusRows,
)
from .status import (
    RUN_END,
    STATUS_COLOURS,
    CheckpointStatus,
    EventType,
    RunKind,
    RunStatus,
    format_seconds,
    step_name,
)

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
    "RUN_END",
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
