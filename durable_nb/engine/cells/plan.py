"""What a %%durable cell does, decided by the engine in one call: restore it, run it, or wait.

The front end asks ``open_cell`` once per cell and shows the answer; it never reads the store
to decide. A new cell in a run this kernel holds costs one read (the run row, to see a cancel
or a decision made elsewhere); a committed cell, its lookup and one read of its values.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Any

from ...model import CheckpointRecord, CommitResult, RunStatus
from .cell_run import CellRun
from .records import HeldOverrides, Restorable

if TYPE_CHECKING:
    from ...model import PendingInterrupt

__all__ = ["CellAction", "CellPlan", "continue_cell", "open_cell"]


class CellAction(Enum):
    """What the front end does with a cell."""

    RESTORE = "restore"  # its values and outputs are in the namespace already: show them
    EXECUTE = "execute"  # run its code and commit what it defined
    REPLAY = "replay"  # a committed --replay cell: run it again, commit only a change
    PAUSED = "paused"  # the run waits at a gate: show it, run nothing


class CellPlan:
    """The engine's answer for one cell, with everything the front end needs to act on it.

    ``cell_run`` is the run the cell belongs to now: another than the one asked about when the
    cell's changed code forked the run (``forked_from``, ``why``) or returned to a run where it
    ran before (``returned_from``). ``held`` are the fork's values put in place (or found changed)
    before the cell runs or restores. ``lost``: the run completed the cell, but its checkpoint was
    pruned, so it runs again. ``gate`` is this cell's open gate, ``waiting`` the run's open gates.
    """

    action: CellAction
    cell_run: CellRun
    committed: CheckpointRecord | None
    restored: Restorable | None
    held: HeldOverrides
    forked_from: str | None
    why: str
    returned_from: str | None
    lost: bool
    gate: PendingInterrupt | None
    waiting: list[PendingInterrupt]
    paused: bool  # a --replay cell of a run that waits at a gate: run it, commit nothing
    source: str  # the code a decided gate's cell continues with

    __slots__ = (
        "action",
        "cell_run",
        "committed",
        "forked_from",
        "gate",
        "held",
        "lost",
        "paused",
        "restored",
        "returned_from",
        "source",
        "waiting",
        "why",
    )

    def __init__(
        self,
        action: CellAction,
        cell_run: CellRun,
        committed: CheckpointRecord | None = None,
        restored: Restorable | None = None,
        held: HeldOverrides | None = None,
        forked_from: str | None = None,
        why: str = "",
        returned_from: str | None = None,
        lost: bool = False,
        gate: PendingInterrupt | None = None,
        waiting: list[PendingInterrupt] | None = None,
        paused: bool = False,
        source: str = "",
    ) -> None:
        self.action = action
        self.cell_run = cell_run
        self.committed = committed
        self.restored = restored
        self.held = HeldOverrides() if held is None else held
        self.forked_from = forked_from
        self.why = why
        self.returned_from = returned_from
        self.lost = lost
        self.gate = gate
        self.waiting = [] if waiting is None else waiting
        self.paused = paused
        self.source = source


async def open_cell(
    cell_run: CellRun,
    node: str,
    source_hash: str,
    namespace: dict[str, Any],
    *,
    rerun: bool = False,
    replay: bool = False,
    exclude: frozenset[str] = frozenset(),
) -> CellPlan:
    """Decide what cell ``node`` (whose code hashes to ``source_hash``) does, and prepare it.

    A committed cell with the same code is restored into ``namespace`` (or replayed); changed
    code forks the run before the cell, or returns to a run of the fork tree where this code ran
    from the same state; a new cell is taken in hand to run. A run that waits at a gate runs nothing.
    """
    if not rerun and node not in cell_run.completed and cell_run.holds():
        # A new cell in a run this kernel holds: nobody else commits to it, so nothing of it is
        # stored; the run row alone says whether someone cancelled it or took it meanwhile.
        await cell_run.refresh()
        if cell_run.holds():
            return await _execute(cell_run, namespace)
    committed = await cell_run.lookup(node)
    returned_from = None
    if committed is not None and not rerun and not _same(committed, source_hash):
        await cell_run.refresh()
        match = await cell_run.matching_run(node, source_hash)
        if match is not None:
            returned_from = cell_run.run_id
            await cell_run.release()
            cell_run = await CellRun.attach(
                cell_run.store, cell_run.values, cell_run.run.name, run_id=match, tracker=cell_run.tracker
            )
            committed = await cell_run.lookup(node)
    if committed is not None and not rerun and _same(committed, source_hash):
        if replay:
            return await _replay(cell_run, committed, namespace, returned_from)
        # Restoring reads the store only: allowed whatever the run waits for.
        held = await cell_run.hold_overrides(namespace) if committed.run_id == cell_run.run_id else HeldOverrides()
        restored = await cell_run.restore(committed, namespace, exclude)
        return CellPlan(CellAction.RESTORE, cell_run, committed, restored, held=held, returned_from=returned_from)
    run = await cell_run.refresh()
    if run.status is RunStatus.PAUSED:
        waiting = await cell_run.store.pending_interrupts(cell_run.run_id)
        gate = next((p for p in waiting if p.node_id == node), None)
        return CellPlan(CellAction.PAUSED, cell_run, gate=gate, waiting=waiting)
    # Completed in this run's lineage, yet nothing to restore: its checkpoint was pruned.
    lost = committed is None and node in cell_run.completed
    if committed is None:
        await cell_run.take(run)
        return await _execute(cell_run, namespace, lost=lost)
    left = cell_run.run_id
    cell_run = await cell_run.fork_before(node)
    plan = await _execute(cell_run, namespace)
    plan.forked_from, plan.why = left, "re-run with --rerun" if rerun else "changed"
    return plan


async def continue_cell(cell_run: CellRun, decided: CommitResult, namespace: dict[str, Any]) -> CellPlan | None:
    """Prepare the cell whose gate ``decided`` claimed to continue in this kernel, if the decision
    handed the run to it; the code comes with the decision (no read of the store)."""
    if decided.run.run_id != cell_run.run_id or decided.run.owner != cell_run.owner or decided.claimed is None:
        return None
    await cell_run.writer.adopt(decided)
    plan = await _execute(cell_run, namespace)
    plan.source = decided.checkpoints[-1].extra.get("source") or ""
    return plan


async def _execute(cell_run: CellRun, namespace: dict[str, Any], *, lost: bool = False) -> CellPlan:
    return CellPlan(CellAction.EXECUTE, cell_run, held=await cell_run.hold_overrides(namespace), lost=lost)


async def _replay(
    cell_run: CellRun, committed: CheckpointRecord, namespace: dict[str, Any], returned_from: str | None
) -> CellPlan:
    run = await cell_run.refresh()
    if run.status is RunStatus.PAUSED:
        return CellPlan(CellAction.REPLAY, cell_run, committed, returned_from=returned_from, paused=True)
    await cell_run.take(run)
    held = await cell_run.hold_overrides(namespace)
    return CellPlan(CellAction.REPLAY, cell_run, committed, held=held, returned_from=returned_from)


def _same(committed: CheckpointRecord, source_hash: str) -> bool:
    return committed.extra.get("source_hash") in (None, source_hash)
