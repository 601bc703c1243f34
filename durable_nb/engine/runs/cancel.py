"""Cancelling a run: settle a paused or pending one, abandon the node of a running one."""

from __future__ import annotations

from ...errors import NotCancellable
from ...model import Commit, EventType, NewEvent, RunRecord, RunStatus, RunUpdate
from ...store.protocol import Conflict, Store
from ..gates.decisions import current_run
from .watch import notify_cancelled

__all__ = ["CANCELLED", "CANCELLED_MESSAGE", "cancel_run"]

CANCELLED_MESSAGE = "Cancelled by user"
# What every cancel (a call, an interrupted node or cell) does to the run row.
CANCELLED = RunUpdate(
    status=RunStatus.CANCELLED, error=CANCELLED_MESSAGE, error_type="Cancelled", owner=None, lease_until=None
)


async def cancel_run(store: Store, run_id: str) -> RunRecord:
    """Cancel a run: settle a paused or pending one, abandon the node of a running one."""
    run = await current_run(store, run_id)
    while True:
        if run.status in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED):
            raise NotCancellable(
                f"Run {run_id} already {run.status.value}; only pending, running or paused runs can be cancelled."
            )
        commit = Commit(
            run_id=run_id,
            events=[NewEvent(EventType.RUN_CANCELLED, None, {"was": run.status.value})],
            run=CANCELLED,
            release_interrupts=True,
            expect_status=frozenset({run.status}),
            expect_owner=run.owner,
        )
        try:
            result = await store.commit(commit)
        except Conflict as conflict:
            run = conflict.run  # the run moved on meanwhile: look again
            continue
        # A runner of this process stops at once; one elsewhere notices at its next poll.
        notify_cancelled(run_id)
        return result.run
