"""Recovery after crashes: find runs whose owner is gone, resume or fail them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..._loop import blocking
from ...errors import AlreadyResumed, ConfigurationError, RunOwnedElsewhere
from ...model import RunStatus
from ...store import resolve_store
from ...store.protocol import Conflict, Store
from ..gates.decisions import expire_gates
from ..workflows.workflow import Workflow
from .ownership import owner_alive
from .run import Run
from .settle import mark_failed

__all__ = ["INTERRUPTED_MESSAGE", "RecoveryReport", "arecover", "recover"]

INTERRUPTED_MESSAGE = "Interrupted by restart — resume from last checkpoint"


@dataclass(slots=True)
class RecoveryReport:
    """What one recover() call did."""

    resumed: list[Run] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    left_alone: list[str] = field(default_factory=list)
    expired_gates: list[str] = field(default_factory=list)
    # Runs taken over and continuing in the background (when recover() was given resume=).
    handed_over: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        return (
            f"RecoveryReport(resumed={[r.id for r in self.resumed]}, handed_over={self.handed_over}, "
            f"failed={self.failed}, left_alone={self.left_alone}, expired_gates={self.expired_gates})"
        )


def _store_of(workflows: list[Workflow], store: Any) -> Store:
    if store is not None or not workflows:
        return resolve_store(store, existing=True)
    chosen = workflows[0].store
    for workflow in workflows[1:]:
        if workflow.store is not chosen:
            raise ConfigurationError(
                "recover() got workflows on different stores; call it once per store with store=..."
            )
    return chosen


async def arecover(
    workflows: Iterable[Workflow] = (),
    *,
    store: Any = None,
    resume: Callable[[Workflow, str], Awaitable[Run | None]] | None = None,
) -> RecoveryReport:
    """Resume runs stranded by dead processes whose workflow is given; mark the others failed.

    Paused runs are left alone (their gates' deadlines are applied); a run whose owner is
    alive is never touched. ``resume(flow, run_id)`` replaces waiting for each resumed run to
    end (a server starts it in the background and returns None).

    Args:
        workflows: The workflows whose stranded runs to continue; other workflows' stranded runs
            are marked failed (``Interrupted by restart — resume from last checkpoint``).
        store: The store's URL or a Store (default: the first workflow's, else ``durable_nb.connect()``).
        resume: How to continue each run (default: ``flow.resume``, waited for).

    Returns:
        The runs resumed, those marked failed, those left alone, and the gates whose deadline passed.

    Raises:
        ConfigurationError: The workflows are on different stores (call it once per store).

    Example:
        >>> dnb.recover([flow])  # at a process's start
    """
    flows = list(workflows)
    resolved = _store_of(flows, store)
    by_name = {flow.name: flow for flow in flows}
    report = RecoveryReport()
    report.expired_gates = [f"{p.run_id}:{p.node_id}" for p in await expire_gates(resolved)]
    for run in await resolved.list_runs(statuses=[RunStatus.RUNNING, RunStatus.PENDING]):
        if owner_alive(run.run_id, run.owner, run.lease_until):
            report.left_alone.append(run.run_id)
            continue
        flow = by_name.get(run.name)
        if flow is not None:
            if flow.store is not resolved:
                flow = Workflow._bound_to(flow, resolved)
            try:
                resumed = await (resume(flow, run.run_id) if resume is not None else flow.aresume(run.run_id))
                if resumed is not None:
                    report.resumed.append(resumed)
                else:
                    report.handed_over.append(run.run_id)
            except (AlreadyResumed, RunOwnedElsewhere):
                report.left_alone.append(run.run_id)  # another recoverer or owner got there first
            continue
        if run.status is RunStatus.PENDING and run.owner is None:
            report.left_alone.append(run.run_id)  # waits for a process that has its code
            continue
        try:
            await resolved.commit(mark_failed(run, INTERRUPTED_MESSAGE, "Interrupted", owner=run.owner))
            report.failed.append(run.run_id)
        except Conflict:
            report.left_alone.append(run.run_id)
    return report


recover = blocking(arecover)
