"""Notebook runs: each durable cell is a node, committed in the order a person runs the cells.

This is the engine half of the notebook front end; it knows nothing of IPython. The front
end asks ``cell_plan.open_cell`` what a cell does and hands over what it defined and
displayed; ``CellRun`` commits it, with helpers it holds for the rest: ``cell_writer``
(the kernel's ownership of the run and its head), ``cell_lineage`` (cells across the fork
tree) and ``cell_values`` (restores and the values forks set).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..._ids import new_id
from ...errors import InvalidInput
from ...model import (
    CheckpointRecord,
    CheckpointState,
    CheckpointStatus,
    EventType,
    NewEvent,
    NewRun,
    RunKind,
    RunRecord,
    RunStatus,
    RunUpdate,
)
from ...store.protocol import Store
from ...store.secret import load_secret
from ..agents.steps import AgentSteps
from ..execution.scope import NodeScope
from ..forks.lineage_values import ForkOverrides
from ..runs.ownership import lease_deadline, this_owner
from ..state.statelog import StateLog
from ..state.values import ValueCodec
from .commit import cell_extra
from .kernel_values import KernelValues
from .lineage import CellLineage
from .namespace import NamespaceTracker
from .records import CellOutcome, HeldOverrides, Restorable
from .writer import CellWriter

if TYPE_CHECKING:
    from ...model import Decision

    # Agents' journals and forks are rare next to committing: attaching a kernel does not import them.
    from ..agents.journal import Step
    from ..forks.literals import OverrideText

__all__ = ["CellOutcome", "CellRun", "HeldOverrides", "Restorable", "new_notebook_run"]

_UNFINISHED = [RunStatus.RUNNING, RunStatus.PENDING, RunStatus.PAUSED, RunStatus.FAILED, RunStatus.CANCELLED]


def new_notebook_run(
    name: str,
    key: str | None,
    *,
    owned: bool = True,
    meta: dict[str, Any] | None = None,
    claimed_by: str | None = None,
) -> NewRun:
    """The row that starts a notebook's run: owned by this process (a kernel attaching), or pending
    for whichever kernel attaches to it by ``key`` (a notebook run the service starts), claimed by
    ``claimed_by`` (the process that starts that kernel) if given."""
    owner = this_owner() if owned else claimed_by
    return NewRun(
        run_id=new_id(),
        name=name,
        kind=RunKind.NOTEBOOK,
        status=RunStatus.RUNNING if owned else RunStatus.PENDING,
        input_manifest={},
        idempotency_key=key,
        owner=owner,
        lease_until=lease_deadline() if owner else None,
        meta=dict(meta or {}),
        events=[NewEvent(EventType.RUN_STARTED)],
    )


class CellRun:
    """The run a kernel is attached to, and the durable state its cells have committed.

    It holds three helpers: ``writer`` takes the run and commits its checkpoints, ``lineage``
    finds cells across the run's fork tree, ``kernel`` loads values into the kernel's namespace
    and keeps what the run's forks set.
    """

    def __init__(
        self,
        store: Store,
        values: ValueCodec,
        run: RunRecord,
        head: CheckpointRecord | None,
        at: CheckpointState,
        tracker: NamespaceTracker | None = None,
        forks: ForkOverrides | None = None,
    ) -> None:
        self.store = store
        self.values = values
        self.writer = CellWriter(store, run, head, at)
        self.lineage = CellLineage(store)
        # The kernel's namespace as the store holds it: it follows the kernel from run to run.
        self.kernel = KernelValues(
            values,
            tracker if tracker is not None else NamespaceTracker(values.secret),
            forks if forks is not None else ForkOverrides(),
        )
        # The bytes the latest commit_cell wrote (what a front end shows beside the cell).
        self.stored_bytes: int | None = None

    @property
    def tracker(self) -> NamespaceTracker:
        """What the store holds of the kernel's namespace."""
        return self.kernel.tracker

    @property
    def forks(self) -> ForkOverrides:
        """The overrides of the forks along this run's lineage."""
        return self.kernel.forks

    @property
    def run(self) -> RunRecord:
        """The run's row, as last read or written by this kernel."""
        return self.writer.run

    @property
    def owner(self) -> str:
        """This kernel's owner token."""
        return self.writer.owner

    @property
    def log(self) -> StateLog:
        """The run's state as this kernel holds it."""
        return self.writer.log

    @property
    def resumes(self) -> dict[str, list[Decision]]:
        """The decisions waiting for cells that have not finished yet."""
        return self.writer.resumes

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def manifest(self) -> dict[str, str]:
        """The run's values as stored: name to address."""
        return self.log.manifest

    @property
    def completed(self) -> list[str]:
        """The cells committed in this run (and the runs it was forked from), in order."""
        return self.log.completed

    # -- attaching -----------------------------------------------------------------------

    @classmethod
    async def attach(
        cls,
        store: Store,
        values: ValueCodec | None,
        name: str,
        *,
        new: bool = False,
        run_id: str | None = None,
        key: str | None = None,
        tracker: NamespaceTracker | None = None,
        new_key: str | None = None,
        claim: str | None = None,
    ) -> CellRun:
        """Attach to ``run_id``, else the latest unfinished run of ``name``, else a new run.

        ``values`` None: values signed with this machine's key. ``new_key``: when no unfinished run
        is found, the run of ``name`` with that idempotency key (made if there is none). ``claim``:
        the owner token of the process that claimed the run for this kernel (it is taken from it).
        """
        values = values if values is not None else ValueCodec(store, load_secret())
        run: RunRecord | None = None
        if run_id is not None:
            run = await store.get_run(run_id)
        elif not new and key is None:
            # A replay's fork belongs to the background kernel that replays it, not to a kernel attaching by name.
            candidates = [r for r in await store.list_runs(name, statuses=_UNFINISHED) if "replay" not in r.meta]
            run = candidates[0] if candidates else None
        if run is None:
            run, created = await store.create_run(new_notebook_run(name, key if key is not None or new else new_key))
            if created:
                # Made just now, in this kernel's hands: no checkpoint, no state, no fork above it to read.
                return cls(store, values, run, None, CheckpointState({}, []), tracker)
        cell_run = await cls.open(store, values, run, tracker)
        if run.status in (RunStatus.RUNNING, RunStatus.PENDING, RunStatus.FAILED, RunStatus.CANCELLED):
            await cell_run.take(claim=claim)
        return cell_run

    @classmethod
    async def open(
        cls, store: Store, values: ValueCodec, run: RunRecord, tracker: NamespaceTracker | None = None
    ) -> CellRun:
        """Read a run's head and state, without taking it (to look up its cells or fork it)."""
        head = await store.resume_point(run.run_id)
        state = await store.state_at(run.run_id)
        return cls(store, values, run, head, state, tracker, await ForkOverrides.read(store, run.run_id))

    async def refresh(self) -> RunRecord:
        """Re-read the run row (and apply gate deadlines that have passed)."""
        return await self.writer.refresh()

    def holds(self) -> bool:
        """True if the run, as last read or written here, is running in this kernel's hands."""
        return self.writer.holds()

    async def take(
        self, seen: RunRecord | None = None, head: CheckpointRecord | None = None, claim: str | None = None
    ) -> None:
        """Own the run in this kernel; a run owned by another live process (but ``claim``'s) is never taken."""
        await self.writer.take(seen, head, claim)

    async def release(self) -> None:
        """Give the run up (detaching the kernel): it stays resumable by any kernel."""
        await self.writer.release()

    async def end(self) -> None:
        """Finish the run: ``run_end`` and status completed."""
        await self.writer.end()

    def scope(self, node: str, observer: Callable[[str], None] | None = None) -> NodeScope:
        """Return what gate(), @idempotent and agents see while cell ``node`` runs."""
        return NodeScope(
            run_id=self.run_id,
            node_id=node,
            store=self.store,
            secret=self.values.secret,
            decisions=list(self.resumes.get(node, [])),
            steps=self.agent_steps(observer),
        )

    # -- the kernel's values -----------------------------------------------------------------

    async def restore(
        self, checkpoint: CheckpointRecord, namespace: dict[str, Any], exclude: frozenset[str] = frozenset()
    ) -> Restorable:
        """Load a committed cell's values and outputs into ``namespace`` (what later forks set wins)."""
        return await self.kernel.restore(checkpoint, namespace, exclude)

    async def reapply_overrides(
        self, checkpoint: CheckpointRecord, namespace: dict[str, Any], exclude: frozenset[str] = frozenset()
    ) -> list[str]:
        """Put back what forks made after ``checkpoint`` set, once its cell ran again (``--replay``)."""
        return await self.kernel.reapply_overrides(checkpoint, namespace, exclude)

    async def reapply_in_force(self, namespace: dict[str, Any], changed: list[str]) -> list[str]:
        """Put back the overrides still in force among ``changed`` (a pruned cell that ran again)."""
        return await self.kernel.reapply_in_force(namespace, changed, self.manifest)

    async def hold_overrides(self, namespace: dict[str, Any]) -> HeldOverrides:
        """Check that the kernel holds the values this run's forks set (placing them the first time)."""
        return await self.kernel.hold(namespace, self.manifest)

    # -- its cells across the fork tree ----------------------------------------------------------

    async def lookup(self, node_id: str) -> CheckpointRecord | None:
        """Return the commit of a cell in this run, or in the runs it was forked from (an indexed lookup)."""
        return await self.lineage.lookup(self.run, node_id)

    async def matching_run(self, node_id: str, source_hash: str) -> str | None:
        """Return another run of this fork tree whose cell ``node_id`` ran this code from the state
        this run had before the cell, so that going back to old code returns to that run."""
        return await self.lineage.matching_run(self.run, self.owner, self.manifest, node_id, source_hash)

    async def manifest_before(self, node: str | None) -> dict[str, str]:
        """Return where the values are stored just before cell ``node`` was committed (None: now)."""
        if node is None:
            return dict(self.manifest)
        committed = await self.lookup(node)
        if committed is None:
            raise InvalidInput(
                f"No cell {node!r} was committed in run {self.run_id} (or the runs it was forked from); "
                "%durable status lists the cells it has."
            )
        return await self.lineage.state_before(committed, node) or {}

    async def fork_before(
        self,
        node: str,
        overrides: dict[str, Any] | OverrideText | None = None,
        *,
        key: str | None = None,
        owned: bool = True,
        meta: dict[str, Any] | None = None,
    ) -> CellRun:
        """Branch a new run from the state just before ``node`` was committed; this run is untouched.

        When that cell was committed before a fork point of this run, the overrides of the forks made
        since are carried into the new fork (restoring the cells above it gives what they give here),
        and ``overrides`` are applied over them. ``key`` makes the fork the run of that idempotency
        key; ``owned=False`` leaves it pending for whichever kernel attaches to it (by that key).
        """
        committed = await self.lookup(node)
        source_run = self.run
        source_id: str | None = None
        carried: dict[str, Any] = {}
        if committed is not None:
            source_run = await self.store.get_run(committed.run_id)
            source_id = await self.lineage.before(committed, node)
            over = self.forks.over(committed.run_id)
            carried = await self.values.load(over) if over else {}
        # Forking is rare next to committing: attaching a kernel does not import it.
        from ..forks.forking import create_fork

        owner, lease = (self.owner, lease_deadline()) if owned else (None, None)
        fork = await create_fork(
            self.store,
            self.values,
            source_run.run_id,
            source_id,
            overrides,
            carried=carried,
            owner=owner,
            lease_until=lease,
            idempotency_key=key,
            at_start=source_id is None,
            meta=meta,
        )
        forked = await type(self).open(self.store, self.values, fork.run, self.tracker)
        forked.resumes.pop(node, None)
        return forked

    # -- committing ---------------------------------------------------------------------------

    async def commit_cell(self, outcome: CellOutcome, *, only_if_changed: bool = False) -> CheckpointRecord | None:
        """Commit a finished cell as ``after:<node>``: what it changed, its outputs, settings and
        shown value (all encoded here), in one transaction.

        With ``only_if_changed`` (a cell run again on restore), nothing is committed when the
        cell changed no stored value; None is returned then.
        """
        node = outcome.node_id
        plan = self.tracker.plan(
            outcome.namespace, self.manifest, outcome.touched, outcome.storable, outcome.open_figures
        )
        # Report what the cell made or what the run held; a name only used and never storable is not news.
        unstored = {n: t for n, t in plan.unstored.items() if n in outcome.bound or n in self.manifest}
        if only_if_changed and not plan.manifest and not unstored and not outcome.deleted:
            self.tracker.committed(plan)
            return None
        extra, cell_blobs = cell_extra(outcome, plan, unstored, self.values.secret)
        # Most cells show what an earlier one did (nothing, say): that value is in the store already.
        blobs = [*plan.blobs, *self.values.unstored(cell_blobs)]
        self.log.remove([*outcome.deleted, *unstored])
        self.log.update(plan.manifest)
        self.log.complete(node)
        self.resumes.pop(node, None)
        draft = self.writer.draft(
            "after",
            node,
            CheckpointStatus.OK,
            node_output=plan.manifest,
            duration=outcome.duration,
            attempts=outcome.attempts,
            extra=extra,
        )
        result = await self.writer.commit(
            checkpoints=[draft],
            blobs=blobs,
            events=[
                NewEvent(EventType.NODE_STARTED, node),
                *outcome.events,
                NewEvent(EventType.NODE_FINISHED, node, {"duration": outcome.duration, "attempts": outcome.attempts}),
            ],
            run=RunUpdate(lease_until=lease_deadline()),
        )
        self.tracker.committed(plan)
        self.tracker.drop(outcome.deleted)
        self.values.mark_stored(blobs)
        self.stored_bytes = sum(blob.size for blob in blobs)
        return result.checkpoints[-1]

    def agent_steps(self, observer: Callable[[str], None] | None = None) -> AgentSteps:
        """Return the hook through which an agent in a cell commits its checkpoints (and shows its turns)."""
        return AgentSteps(None, self._agent_steps, self.values, observer)

    async def _agent_steps(self, steps: list[Step]) -> None:
        drafts = [
            self.writer.draft(
                "",
                s.node_id,
                CheckpointStatus.OK,
                step=s.step,
                agent_path=s.agent_path,
                node_input=s.node_input,
                item_index=s.item_index,
                extra={"step_type": s.step_type},
            )
            for s in steps
        ]
        blobs = [b for s in steps for b in s.blobs]
        await self.writer.commit(checkpoints=drafts, blobs=blobs, idempotent=[r for s in steps for r in s.idempotent])
        self.values.mark_stored(blobs)
        for step, draft in zip(steps, drafts, strict=True):
            step.checkpoint_id = draft.checkpoint_id
