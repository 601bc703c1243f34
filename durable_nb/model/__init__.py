"""The data model shared by the store and the engine: plain records, no behaviour.

``status`` holds what runs, checkpoints and events can be; ``records`` the rows a store reads
back; ``commits`` what a caller hands the store to write and what a commit returns; ``gates``
the records of gates and decisions; ``reports`` status rows, events and what a prune deleted.
The last two load on first use: each record is a dataclass, and a kernel attaching to a run
(most of what a notebook does) needs none of theirs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names
from .commits import UNCHANGED, Commit, CommitResult, NewRun, RunUpdate, WriteRow
from .records import Blob, CheckpointDraft, CheckpointRecord, CheckpointState, NewEvent, RunRecord
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

if TYPE_CHECKING:
    from .gates import Decision, PendingInterrupt
    from .reports import EventRecord, PruneReport, StatusRows

__getattr__, __dir__ = lazy_names(
    __name__,
    {
        "Decision": ".gates",
        "PendingInterrupt": ".gates",
        "EventRecord": ".reports",
        "PruneReport": ".reports",
        "StatusRows": ".reports",
    },
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
    "WriteRow",
    "format_seconds",
    "step_name",
]
