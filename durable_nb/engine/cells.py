"""Notebook runs: each durable cell is a node, committed in the order a person runs the cells.

This is the engine half of the notebook front end; it knows nothing of IPython.
The front end hands over what a cell defined and displayed; this module commits it,
finds what a re-executed cell can restore, and keeps the kernel's ownership of the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .._ids import new_id
from ..errors import NotResumable, RunOwnedElsewhere, StoreError
from ..model import (
    CheckpointDraft,
    CheckpointRecord,
    CheckpointState,
    CheckpointStatus,
    Commit,
    CommitResult,
    Decision,
    EventType,
    NewEvent,
    NewRun,
    RunKind,
    RunRecord,
    RunStatus,
    RunUpdate,
    step_name,
)
from ..store import codec
from ..store.protocol import Conflict, Store
from .agents.journal import AgentSteps, Step
from .cancel import CANCELLED
from .cell_lineage import CellLineage
from .cell_records import CellOutcome, HeldOverrides, Restorable
from .decisions import current_run, decisions_of
from .fork_overrides import ForkOverrides, same_value, shared_with
from .gates import Suspend
from .namespace import NamespaceTracker
from .ownership import gave_up_on, lease_deadline, owner_alive, taken_back, this_owner
from .settle import release_after_failure
from .statelog import StateLog
from .values import ValueCodec

__all__ = ["CellOutcome", "CellRun", "HeldOverrides", "Restorable", "new_notebook_run"]

_MISSING = object()
_UNFINISHED = [RunStatus.RUNNING, RunStatus.PENDING, RunStatus.PAUSED, RunStatus.FAILED, RunStatus.CANCELLED]


def new_notebook_run(name: str, key: str | None, *, owned: bool = True, meta: dict[str, Any] | None = None) -> NewRun:
    """The row that starts a notebook's run: owned by this process (a kernel attaching), or pending
    for whichever kernel attaches to it by ``key`` (a notebook run the service starts)."""
    return NewRun(
        run_id=new_id(),
        name=name,
        kind=RunKind.NOTEBOOK,
        status=RunStatus.RUNNING if owned else RunStatus.PENDING,
        input_manifest={},
        idempotency_key=key,
        owner=this_owner() if owned else None,
        lease_until=lease_deadline() if owned else None,
        meta=dict(meta or {}),
        events=[NewEvent(EventType.RUN_STARTED)],
    )


def _recipes(outcome: CellOutcome, unstored: dict[str, str]) -> dict[str, Any]:
    """How the front end makes again the values that cannot be stored, for those it can."""
    if outcome.recipe is None:
        return {}
    found = {name: outcome.recipe(name) for name in unstored}
    return {name: recipe for name, recipe in found.items() if recipe is not None}


class CellRun(CellLineage):
    """The run a kernel is attached to, and the durable state its cells have committed."""

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
        # The kernel's namespace as the store holds it: it follows the kernel from run to run.
        self.tracker = tracker if tracker is not None else NamespaceTracker(values.secret)
        self.run = run
        self.owner = this_owner()
        self.log = StateLog(at)
        self.resumes: dict[str, list[Decision]] = decisions_of(head)
        self.head_id = head.checkpoint_id if head else None
        self.forks = forks if forks is not None else ForkOverrides()
        self._entered = False  # the kernel reached this run's part after the fork point
        self._held: dict[str, int] = {}  # override name -> id of the kernel's value last checked

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
        values: ValueCodec,
        name: str,
        *,
        new: bool = False,
        run_id: str | None = None,
        key: str | None = None,
        tracker: NamespaceTracker | None = None,
    ) -> CellRun:
        """Attach to ``run_id``, else the latest unfinished run of ``name``, else a new run."""
        run: RunRecord | None = None
        if run_id is not None:
            run = await store.get_run(run_id)
        elif not new and key is None:
            candidates = await store.list_runs(name, statuses=_UNFINISHED)
            run = candidates[0] if candidates else None
        if run is None:
            run, _ = await store.create_run(new_notebook_run(name, key))
        cell_run = await cls.open(store, values, run, tracker)
        if run.status in (RunStatus.RUNNING, RunStatus.PENDING, RunStatus.FAILED, RunStatus.CANCELLED):
            await cell_run.take()
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
        self.run = await current_run(self.store, self.run_id)
        return self.run

    async def take(self, seen: RunRecord | None = None, head: CheckpointRecord | None = None) -> None:
        """Own the run in this kernel; a run owned by another live process is never taken.

        ``seen`` is the run row just read (else it is read here); ``head``, the checkpoint the
        caller just wrote (a decision), saves reading the head again when it follows ours.
        """
        run = seen if seen is not None else await self.refresh()
        if run.status is RunStatus.RUNNING and run.owner == self.owner and not gave_up_on(run.run_id):
            return
        if run.status is RunStatus.COMPLETED:
            raise NotResumable(
                f"Run {run.run_id} ({run.name}) is completed. Start another with %durable run "
                f"{run.name} --new, or fork it with %durable fork."
            )
        if run.status is RunStatus.PAUSED:
            raise NotResumable(f"Run {run.run_id} waits at a gate; decide it first.")
        if run.status is RunStatus.RUNNING and owner_alive(run.run_id, run.owner, run.lease_until):
            raise RunOwnedElsewhere(
                f"Run {run.run_id} ({run.name}) is attached to another live kernel or process "
                f"({run.owner}). Shut that kernel down, or use %durable run {run.name} --new "
                "for a separate run."
            )
        try:
            result = await self.store.commit(
                Commit(
                    run_id=run.run_id,
                    run=RunUpdate(
                        status=RunStatus.RUNNING,
                        owner=self.owner,
                        lease_until=lease_deadline(),
                        error=None,
                        error_type=None,
                    ),
                    expect_status=frozenset({run.status}),
                    expect_owner=run.owner,
                )
            )
        except Conflict as conflict:
            raise RunOwnedElsewhere(
                f"Run {run.run_id} changed while this kernel attached to it (now "
                f"{conflict.run.status.value}); run the cell again."
            ) from None
        taken_back(run.run_id)
        self.run = result.run
        if head is not None and head.parent_checkpoint_id == self.head_id:
            # Built on the checkpoint this kernel wrote last: the state is the one it holds.
            self.resumes = decisions_of(head)
            self.head_id = head.checkpoint_id
        else:
            await self._reload_head()

    async def _reload_head(self) -> None:
        head = await self.store.resume_point(self.run_id)
        self.log = StateLog(await self.store.state_at(self.run_id))
        self.resumes = decisions_of(head)
        self.head_id = head.checkpoint_id if head else None

    async def restore(
        self, checkpoint: CheckpointRecord, namespace: dict[str, Any], exclude: frozenset[str] = frozenset()
    ) -> Restorable:
        """Load a committed cell's values into ``namespace`` (its variables that share objects
        are loaded together) and return its outputs.

        For a cell committed before a fork point of this run, what the fork set wins over what
        the cell defined (or deleted).
        """
        stored = {k: v for k, v in (checkpoint.node_output or {}).items() if k not in exclude}
        deleted = [name for name in checkpoint.extra.get("deleted", []) if name not in exclude]
        won = self._overrides_over(checkpoint, exclude)
        manifest = {**stored, **won}
        values = await self.values.load(manifest, namespace)
        outputs_hash = checkpoint.extra.get("outputs")
        outputs = await self.values.load_one(outputs_hash) if outputs_hash else []
        namespace.update(values)
        for name, address in manifest.items():
            self.tracker.restored(name, address)
        gone = [name for name in deleted if name not in won]
        for name in gone:
            namespace.pop(name, None)
        self.tracker.drop(gone)
        return Restorable(
            checkpoint,
            list(values),
            outputs,
            dict(checkpoint.extra.get("unstored", {})),
            reasons=checkpoint.extra.get("reasons", {}),
            overridden=sorted(won),
            shared=shared_with(stored, won),
        )

    def _overrides_over(self, checkpoint: CheckpointRecord, exclude: frozenset[str]) -> dict[str, str]:
        """The overrides of forks made after ``checkpoint`` that name what its cell defined or deleted."""
        touched = {*(checkpoint.node_output or {}), *checkpoint.extra.get("deleted", [])} - exclude
        return {name: address for name, address in self.forks.over(checkpoint.run_id).items() if name in touched}

    async def reapply_overrides(
        self, checkpoint: CheckpointRecord, namespace: dict[str, Any], exclude: frozenset[str] = frozenset()
    ) -> list[str]:
        """Put back what forks made after ``checkpoint`` set, once its cell ran again (``--replay``)."""
        won = self._overrides_over(checkpoint, exclude)
        if won:
            namespace.update(await self.values.load(won, namespace))
            for name, address in won.items():
                self.tracker.restored(name, address)
        return sorted(won)

    async def reapply_in_force(self, namespace: dict[str, Any], changed: list[str]) -> list[str]:
        """Put back the overrides still in force among ``changed``, after a cell the run completed before
        its fork point ran again (its checkpoint was pruned): it stands for a restore, not a new value."""
        in_force = self.forks.in_force(self.manifest)
        won = {name: in_force[name] for name in changed if name in in_force}
        if won:
            namespace.update(await self.values.load(won, namespace))
            for name, address in won.items():
                self.tracker.restored(name, address)
        return sorted(won)

    async def hold_overrides(self, namespace: dict[str, Any]) -> HeldOverrides:
        """Check that the kernel holds the values this run's forks set (and no later cell replaced).

        The first time the kernel reaches the run after its fork point, a differing or missing
        value is put in place (a plain cell, or a kernel that never restored the cell defining
        it, holds another); afterwards a difference is a change made on purpose and is reported
        once, never undone.
        """
        held = HeldOverrides()
        in_force = self.forks.in_force(self.manifest)
        # A value already checked and still bound to the same object needs no look at the store.
        unsure = {n: a for n, a in in_force.items() if n not in namespace or self._held.get(n) != id(namespace[n])}
        wanted = await self.values.load(unsure, namespace) if unsure else {}
        for name, value in wanted.items():
            current = namespace.get(name, _MISSING)
            if current is not _MISSING and same_value(current, value):
                self._held[name] = id(current)
            elif not self._entered:
                namespace[name] = value
                self.tracker.restored(name, in_force[name])
                self._held[name] = id(value)
                held.placed[name] = value
            else:
                self._held[name] = id(current)  # reported once for this value
                held.changed[name] = value
        self._entered = True
        return held

    # -- committing ---------------------------------------------------------------------------

    def _draft(self, kind: str, node_id: str | None, status: CheckpointStatus, **fields: Any) -> CheckpointDraft:
        step = fields.pop("step", None) or step_name(kind, node_id)
        draft = CheckpointDraft(
            checkpoint_id=new_id(),
            step=step,
            node_id=node_id,
            status=status,
            **self.log.draft_fields(),
            parent_checkpoint_id=self.head_id,
            resumes={k: [d.to_json() for d in v] for k, v in self.resumes.items()},
            **fields,
        )
        self.head_id = draft.checkpoint_id
        return draft

    async def _commit(self, **fields: Any) -> CommitResult:
        try:
            result = await self.store.commit(
                Commit(
                    run_id=self.run_id,
                    expect_status=frozenset({RunStatus.RUNNING}),
                    expect_owner=self.owner,
                    seen=self.run,
                    **fields,
                )
            )
        except Conflict as conflict:
            self.run = conflict.run
            raise RunOwnedElsewhere(
                f"Run {self.run_id} is now {conflict.run.status.value} (owner {conflict.run.owner}); "
                "this cell's result was not committed. Run it again to take the run back."
            ) from None
        except StoreError as failure:
            # Nothing of the cell was kept: let the run go, so that any kernel can continue it.
            node = next((c.node_id for c in fields.get("checkpoints", ()) if c.node_id), None)
            self.run = await release_after_failure(self.store, self.run, self.owner, failure, node) or self.run
            raise
        self.run = result.run
        return result

    async def commit_cell(self, outcome: CellOutcome, *, only_if_changed: bool = False) -> CheckpointRecord | None:
        """Commit a finished cell as ``after:<node>``: what it changed, its outputs, one transaction.

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
        remade = _recipes(outcome, plan.unstored)
        outputs = codec.encode(outcome.outputs, self.values.secret, f"outputs of {node}")
        blobs = [*plan.blobs, *outcome.blobs, outputs]
        self.log.remove([*outcome.deleted, *unstored])
        self.log.update(plan.manifest)
        self.log.complete(node)
        self.resumes.pop(node, None)
        draft = self._draft(
            "after",
            node,
            CheckpointStatus.OK,
            node_output=plan.manifest,
            duration=outcome.duration,
            attempts=outcome.attempts,
            extra={
                **outcome.extra,
                "source_hash": outcome.source_hash,
                "outputs": outputs.hash,
                "blobs": [outputs.hash, *(b.hash for b in outcome.blobs)],
                "unstored": unstored,
                "deleted": sorted(outcome.deleted),
                **({"reasons": {n: plan.reasons[n] for n in unstored if n in plan.reasons}} if unstored else {}),
                **({"remade": remade} if remade else {}),
            },
        )
        result = await self._commit(
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
        return result.checkpoints[-1]

    async def fail_cell(
        self,
        node: str,
        error: BaseException,
        trace: str,
        duration: float,
        attempts: int,
        source_hash: str,
        retried: list[NewEvent] | None = None,
    ) -> None:
        """Commit ``failed:<node>``; the run is failed and resumes when the fixed cell runs."""
        message = f"Node '{node}' failed: {type(error).__name__}: {error}"
        draft = self._draft(
            "failed",
            node,
            CheckpointStatus.FAILED,
            error=message,
            error_type=type(error).__name__,
            traceback=trace,
            duration=duration,
            attempts=attempts,
            extra={"source_hash": source_hash},
        )
        await self._commit(
            checkpoints=[draft],
            events=[
                NewEvent(EventType.NODE_STARTED, node),
                *(retried or []),
                NewEvent(EventType.NODE_FAILED, node, {"error": message}),
            ],
            run=RunUpdate(
                status=RunStatus.FAILED, error=message, error_type=type(error).__name__, owner=None, lease_until=None
            ),
        )

    async def pause_cell(
        self,
        node: str,
        suspend: Suspend,
        source: str,
        source_hash: str,
        duration: float,
        retried: list[NewEvent] | None = None,
    ) -> str:
        """Commit ``gate:<node>`` with its pending row; return the gate's checkpoint id."""
        now = time.time()
        draft = self._draft(
            "gate",
            node,
            CheckpointStatus.INTERRUPTED,
            interrupt=suspend.detail(node),
            duration=duration,
            extra={"source": source, "source_hash": source_hash},
        )
        pending = suspend.pending(self.run_id, node, draft.checkpoint_id, now)
        await self._commit(
            checkpoints=[draft],
            open_interrupts=[pending],
            events=[
                *(retried or []),
                NewEvent(EventType.GATE_OPENED, node, {"reason": suspend.reason}),
                NewEvent(EventType.RUN_PAUSED, node),
            ],
            run=RunUpdate(status=RunStatus.PAUSED, owner=None, lease_until=None),
        )
        return draft.checkpoint_id

    def agent_steps(self, observer: Callable[[str], None] | None = None) -> AgentSteps:
        """Return the hook through which an agent in a cell commits its checkpoints (and shows its turns)."""
        return AgentSteps(None, self._agent_steps, self.values, observer)

    async def _agent_steps(self, steps: list[Step]) -> None:
        drafts = [
            self._draft(
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
        await self._commit(checkpoints=drafts, blobs=blobs, idempotent=[r for s in steps for r in s.idempotent])
        self.values.mark_stored(blobs)

    async def cancel_cell(self, node: str) -> None:
        """Record an interrupted cell: the run is cancelled, nothing of the cell kept."""
        await self._commit(
            events=[NewEvent(EventType.RUN_CANCELLED, node, {"was": "running"})],
            run=CANCELLED,
        )

    async def end(self) -> None:
        """Finish the run: ``run_end`` and status completed."""
        await self.take()
        draft = self._draft("run_end", None, CheckpointStatus.COMPLETED)
        await self._commit(
            checkpoints=[draft],
            events=[NewEvent(EventType.RUN_COMPLETED)],
            run=RunUpdate(status=RunStatus.COMPLETED, owner=None, lease_until=None),
        )

    async def release(self) -> None:
        """Give the run up (detaching the kernel): it stays resumable by any kernel."""
        run = await self.refresh()
        if run.status is RunStatus.RUNNING and run.owner == self.owner:
            await self._commit(run=RunUpdate(status=RunStatus.PENDING, owner=None, lease_until=None))
