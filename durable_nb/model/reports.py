"""What a store reports when asked: a run's status rows and events, and what a prune deleted."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["EventRecord", "PruneReport", "StatusRows"]


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
class EventRecord:
    """One row of a run's event log, numbered per run without gaps."""

    run_id: str
    seq: int
    type: str
    node_id: str | None
    at: float
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class PruneReport:
    """What prune() deleted."""

    checkpoints: int = 0
    events: int = 0
    idempotency: int = 0
    blobs: int = 0
    bytes_freed: int = 0
