"""Checkpoints that continue another one: what a decision, a deadline or a fork carries over."""

from __future__ import annotations

from typing import Any

from ..._ids import new_id
from ...model import CheckpointDraft, CheckpointRecord, CheckpointStatus, step_name

__all__ = ["draft_after"]


def draft_after(
    head: CheckpointRecord,
    kind: str,
    node_id: str | None,
    status: CheckpointStatus,
    *,
    label: str | None = None,
    **fields: Any,
) -> CheckpointDraft:
    """Return a checkpoint ``kind:<label or node_id>`` after ``head`` that keeps its queue,
    skipped nodes, routes, decisions and loop counters unless ``fields`` say otherwise."""
    carried: dict[str, Any] = {
        "queue": head.queue,
        "skipped": head.skipped,
        "routes": head.routes,
        "resumes": head.resumes,
        "counters": head.counters,
        "parent_checkpoint_id": head.checkpoint_id,
    }
    carried.update(fields)
    return CheckpointDraft(
        checkpoint_id=new_id(), step=step_name(kind, label or node_id), node_id=node_id, status=status, **carried
    )
