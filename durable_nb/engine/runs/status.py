"""A run's status: counts per node status and every execution's address."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from ...model import RunRecord, RunStatus, StatusRows

__all__ = ["NODE_STATUSES", "describe"]

NODE_STATUSES = ("pending", "running", "ok", "failed", "skipped", "suspended", "cancelled")
_OPEN = {"failed": "failed", "gate": "suspended", "approved": "pending"}
_QUEUED = {RunStatus.RUNNING: "running", RunStatus.CANCELLED: "cancelled"}

Address = tuple[str, str | None, int | None, int | None]


def _address(node_id: str, branch_key: str | None, iteration: int | None, item_index: int | None) -> dict[str, Any]:
    return {"node_id": node_id, "branch_key": branch_key, "iteration": iteration, "item_index": item_index}


def describe(run: RunRecord, rows: StatusRows, nodes: Iterable[str] = ()) -> dict[str, Any]:
    """Build ``{run_id, status, node_counts, executions}`` from a run's status rows (one call)."""
    executions: dict[Address, str] = {}
    for step, node, branch_key, iteration, item_index in rows.steps:
        if step == "run_end" or node is None:
            continue
        kind = step.split(":", 1)[0]
        if kind == "after":
            # A finished execution settles the open (failed, gated, decided) one of that node.
            executions.pop((node, branch_key, None, item_index), None)
            executions.pop((node, branch_key, None, None), None)
            executions[(node, branch_key, iteration, item_index)] = "ok"
        elif kind in _OPEN:
            executions[(node, branch_key, None, item_index)] = _OPEN[kind]
    if rows.steps:
        completed = set(rows.completed)
        open_nodes = {key[0] for key, status in executions.items() if status != "ok"}
        for node in rows.queue:
            if node not in completed and node not in open_nodes:
                executions[(node, None, None, None)] = _QUEUED.get(run.status, "pending")
        for node in rows.skipped:
            executions[(node, None, None, None)] = "skipped"
        finished = {key[0] for key in executions}
        for node in rows.completed:
            if node not in finished:
                executions[(node, None, None, None)] = "ok"  # a switch: routed, never checkpointed
    if run.status is not RunStatus.PAUSED:
        # A failed or cancelled run released its gates: they will be asked again on resume.
        for key, status in executions.items():
            if status == "suspended":
                executions[key] = _QUEUED.get(run.status, "pending")
    seen = {key[0] for key in executions}
    for node in nodes:
        if node not in seen:
            executions[(node, None, None, None)] = "pending"
    counts = Counter(executions.values())
    return {
        "run_id": run.run_id,
        "status": run.status.value,
        "node_counts": {name: counts.get(name, 0) for name in NODE_STATUSES},
        "executions": [{"address": _address(*key), "status": status} for key, status in executions.items()],
    }
