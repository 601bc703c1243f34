"""A runner's commits: checkpoints drafted one after another and written as the run's owner.

Every commit expects the run ``running`` and owned by this runner, so a run cancelled or taken
over meanwhile stops here without writing: a late result is discarded. Events that have no
commit of their own (retries, a node's start) are carried to the next one.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..._ids import new_id
from ...errors import RunCancelled, StoreError
from ...model import (
    CheckpointDraft,
    CheckpointStatus,
    Commit,
    EventType,
    NewEvent,
    RunRecord,
    RunStatus,
    RunUpdate,
    step_name,
)
from ...store.protocol import Conflict, Store
from ..agents.journal import Step
from ..runs.cancel import CANCELLED
from ..runs.ownership import release_on_interrupt
from ..runs.settle import release_after_failure
from ..runs.watch import Watch
from ..state.values import ValueCodec
from .run_progress import RunProgress

__all__ = ["RUNNING", "RunCommits", "finished"]

RUNNING = frozenset({RunStatus.RUNNING})


def finished(status: RunStatus, error: str | None = None, error_type: str | None = None) -> RunUpdate:
    """Return the update that ends a run with ``status`` and hands it back."""
    return RunUpdate(status=status, error=error, error_type=error_type, owner=None, lease_until=None)


def _commit_node(commit: Commit) -> str | None:
    """Return the node a commit was about, if any (for the event that reports its failure)."""
    return next((c.node_id for c in commit.checkpoints if c.node_id is not None), None)


class RunCommits:
    """Drafts a run's checkpoints (each the child of the last) and commits them as the run's owner."""

    def __init__(
        self,
        store: Store,
        values: ValueCodec,
        run: RunRecord,
        owner: str,
        progress: RunProgress,
        head_checkpoint_id: str | None,
    ) -> None:
        self.store = store
        self.values = values
        self.run = run
        self.owner = owner
        self.progress = progress
        self.head = head_checkpoint_id
        self.carry: list[NewEvent] = []
        # Set when the run was cancelled or taken over, or a commit failed: nothing more is written.
        self.abandoned = False
        self.watch: Watch | None = None
        self._lock: asyncio.Lock | None = None

    def guard(self) -> asyncio.Lock:
        """Return the lock that keeps the run's commits (and what they read) one at a time."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    def draft(
        self, kind: str, node_id: str | None, status: CheckpointStatus, queue: list[str], **fields: Any
    ) -> CheckpointDraft:
        """Draft the run's next checkpoint, with what changed since the last one (``step`` and
        ``branch_key`` are worked out unless given: a map's items give theirs, the same for all)."""
        step = fields.pop("step", None) or step_name(kind, node_id)
        if "branch_key" not in fields:
            fields["branch_key"] = self.progress.branch_key(node_id)
        draft = CheckpointDraft(
            checkpoint_id=new_id(),
            step=step,
            node_id=node_id,
            status=status,
            queue=queue,
            **self.progress.draft_fields(),
            parent_checkpoint_id=self.head,
            **fields,
        )
        self.head = draft.checkpoint_id
        return draft

    async def commit(self, events: list[NewEvent], **fields: Any) -> None:
        """Commit drafts, blobs and events (with the carried ones) as the run's owner."""
        if self.abandoned:
            raise RunCancelled(f"Run {self.run.run_id} was cancelled; its last result was discarded.")
        carried = list(self.carry)
        self.carry.clear()
        commit = Commit(
            run_id=self.run.run_id,
            events=carried + events,
            expect_status=RUNNING,
            expect_owner=self.owner,
            seen=self.run,
            **fields,
        )
        try:
            result = await self.store.commit(commit)
        except Conflict as conflict:
            # Before StoreError, of which it is one: a run cancelled (or taken) meanwhile is not a failed write.
            self.run = conflict.run
            self.abandoned = True
            raise RunCancelled(
                f"Run {self.run.run_id} became {conflict.run.status.value} while this process worked "
                "on it; its last result was discarded."
            ) from conflict
        except StoreError as failure:
            # Nothing of this commit was kept; the nodes in flight stop and the run is released.
            self.abandoned = True
            renewed = self.watch.lease_until if self.watch is not None else None
            settled = await release_after_failure(
                self.store, self.run, self.owner, failure, _commit_node(commit), renewed
            )
            self.run = settled or self.run
            raise
        self.values.mark_stored(commit.blobs)
        self.run = result.run

    async def agent_steps(self, steps: list[Step]) -> None:
        """Commit agents' checkpoints (or map_items items) inside a running node, in one transaction: the
        run's queue and decisions carry on."""
        async with self.guard():
            queue = self.progress.ready()
            wave_writes = self.progress.wave_writes
            drafts = [
                self.draft(
                    "",
                    s.node_id,
                    CheckpointStatus.OK,
                    queue,
                    step=s.step,
                    agent_path=s.agent_path,
                    node_input=s.node_input,
                    item_index=s.item_index,
                    iteration=None,
                    extra={"step_type": s.step_type, "wave_writes": dict(wave_writes)},
                )
                for s in steps
            ]
            blobs = [b for s in steps for b in s.blobs]
            await self.commit([], checkpoints=drafts, blobs=blobs, idempotent=[r for s in steps for r in s.idempotent])
            for step, draft in zip(steps, drafts, strict=True):
                step.checkpoint_id = draft.checkpoint_id

    async def record_interrupt(self) -> None:
        """Record that this process stopped working on the run: a server stopping hands it back for
        the next process; Ctrl-C cancels it (resumable)."""
        handed_back = release_on_interrupt.get()
        try:
            await self.store.commit(
                Commit(
                    run_id=self.run.run_id,
                    events=[] if handed_back else [NewEvent(EventType.RUN_CANCELLED, None, {"was": "running"})],
                    run=RunUpdate(status=RunStatus.PENDING, owner=None, lease_until=None) if handed_back else CANCELLED,
                    expect_status=RUNNING,
                    expect_owner=self.owner,
                )
            )
        except (Conflict, StoreError):
            pass
