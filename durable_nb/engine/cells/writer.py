"""A notebook run in one kernel's hands: taking it, the head its checkpoints build on, and committing them.

Every write of a kernel's run goes through ``commit``, which expects the run still running in
this kernel's hands: a run someone else took or cancelled meanwhile is never written over.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..._ids import new_id
from ...errors import NotResumable, RunOwnedElsewhere, StoreError
from ...model import (
    CheckpointDraft,
    CheckpointRecord,
    CheckpointState,
    CheckpointStatus,
    Commit,
    CommitResult,
    EventType,
    NewEvent,
    RunRecord,
    RunStatus,
    RunUpdate,
    step_name,
)
from ...store.protocol import Conflict, Store
from ..gates.gate import Suspend
from ..runs.ownership import gave_up_on, owner_alive, taken_back, taking_over, this_owner
from ..state.statelog import StateLog

if TYPE_CHECKING:
    from ...model import Decision

__all__ = ["CellWriter"]


def _resumes(head: CheckpointRecord | None) -> dict[str, list[Decision]]:
    """The decisions ``head`` carries for nodes not finished yet: most carry none, and the gates'
    module is imported only for one that does."""
    if head is None or not head.resumes:
        return {}
    from ..gates.decisions import decisions_of

    return decisions_of(head)


class CellWriter:
    """The run a kernel writes to: its row as last seen, its owner token, its state log and head."""

    def __init__(self, store: Store, run: RunRecord, head: CheckpointRecord | None, at: CheckpointState) -> None:
        self.store = store
        self.run = run
        self.owner = this_owner()
        self.log = StateLog(at)
        self.resumes: dict[str, list[Decision]] = _resumes(head)
        self.head_id = head.checkpoint_id if head else None

    @property
    def run_id(self) -> str:
        return self.run.run_id

    async def refresh(self) -> RunRecord:
        """Re-read the run row (and apply gate deadlines that have passed)."""
        run = await self.store.get_run(self.run_id)
        if run.status is RunStatus.PAUSED:
            # Gates and their deadlines: imported for a paused run only, not by every attach.
            from ..gates.decisions import current_run

            run = await current_run(self.store, self.run_id, run)
        self.run = run
        return self.run

    def holds(self) -> bool:
        """True if the run, as last read or written here, is running in this kernel's hands."""
        run = self.run
        return run.status is RunStatus.RUNNING and run.owner == self.owner and not gave_up_on(run.run_id)

    async def adopt(self, decided: CommitResult) -> None:
        """Take on a decision that handed this run to this kernel in its own commit."""
        self.run = decided.run
        taken_back(self.run_id)
        await self.follow(decided.checkpoints[-1])

    async def follow(self, head: CheckpointRecord | None) -> None:
        """Move to ``head``, a checkpoint just written on the run; read the head again if it is not on ours."""
        if head is not None and head.parent_checkpoint_id == self.head_id:
            # Built on the checkpoint this kernel wrote last: the state is the one it holds.
            self.resumes = _resumes(head)
            self.head_id = head.checkpoint_id
        else:
            await self.reload_head()

    async def take(
        self, seen: RunRecord | None = None, head: CheckpointRecord | None = None, claim: str | None = None
    ) -> None:
        """Own the run in this kernel; a run owned by another live process is never taken.

        ``seen`` is the run row just read (else it is read here); ``head``, the checkpoint the
        caller just wrote (a decision), saves reading the head again when it follows ours.
        ``claim``: the owner token of the process that claimed the run for this kernel, taken
        over although it lives.
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
        # A pending run may be claimed by a process about to start a kernel for it: as good as running there.
        held = run.status in (RunStatus.RUNNING, RunStatus.PENDING) and run.owner is not None
        if held and run.owner not in (claim, self.owner) and owner_alive(run.run_id, run.owner, run.lease_until):
            raise RunOwnedElsewhere(
                f"Run {run.run_id} ({run.name}) is attached to another live kernel or process "
                f"({run.owner}). Shut that kernel down, or use %durable run {run.name} --new "
                "for a separate run."
            )
        try:
            result = await self.store.commit(
                Commit(
                    run_id=run.run_id,
                    run=taking_over(self.owner),
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
        await self.follow(head)

    async def reload_head(self) -> None:
        """Read the run's head and state again (someone else wrote to it since this kernel did)."""
        head = await self.store.resume_point(self.run_id)
        self.log = StateLog(await self.store.state_at(self.run_id))
        self.resumes = _resumes(head)
        self.head_id = head.checkpoint_id if head else None

    def draft(self, kind: str, node_id: str | None, status: CheckpointStatus, **fields: Any) -> CheckpointDraft:
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

    async def commit(self, **fields: Any) -> CommitResult:
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
            from ..runs.settle import release_after_failure  # a failed commit is rare: not loaded to attach

            self.run = await release_after_failure(self.store, self.run, self.owner, failure, node) or self.run
            raise
        self.run = result.run
        return result

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
        draft = self.draft(
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
        await self.commit(
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
        draft = self.draft(
            "gate",
            node,
            CheckpointStatus.INTERRUPTED,
            interrupt=suspend.detail(node),
            duration=duration,
            extra={"source": source, "source_hash": source_hash},
        )
        pending = suspend.pending(self.run_id, node, draft.checkpoint_id, now)
        await self.commit(
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

    async def cancel_cell(self, node: str) -> None:
        """Record an interrupted cell: the run is cancelled, nothing of the cell kept."""
        from ..runs.cancel import CANCELLED  # cancelling (and the run watch it tells) is rare: not loaded to attach

        await self.commit(
            events=[NewEvent(EventType.RUN_CANCELLED, node, {"was": "running"})],
            run=CANCELLED,
        )

    async def end(self) -> None:
        """Finish the run: ``run_end`` and status completed."""
        await self.take()
        draft = self.draft("run_end", None, CheckpointStatus.COMPLETED)
        await self.commit(
            checkpoints=[draft],
            events=[NewEvent(EventType.RUN_COMPLETED)],
            run=RunUpdate(status=RunStatus.COMPLETED, owner=None, lease_until=None),
        )

    async def release(self) -> None:
        """Give the run up (detaching the kernel): it stays resumable by any kernel."""
        run = await self.refresh()
        if run.status is RunStatus.RUNNING and run.owner == self.owner:
            await self.commit(run=RunUpdate(status=RunStatus.PENDING, owner=None, lease_until=None))
