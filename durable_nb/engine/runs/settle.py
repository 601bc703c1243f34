"""After a failed write (or an error the engine did not expect): leave the run resumable anywhere.

A process that owns a run and cannot write to the store any more must not keep the run: other
processes never take a run from a live owner. It records the run as failed, with the store's
error, when the store still takes that small write; otherwise it gives the run up where other
processes of this machine look (and the lease, no longer renewed, frees it for other machines).
"""

from __future__ import annotations

from dataclasses import replace

from ...errors import StoreError
from ...model import Commit, EventType, NewEvent, RunRecord, RunStatus, RunUpdate
from ...store.protocol import Conflict, Store
from .ownership import give_up

__all__ = ["mark_failed", "release_after_failure"]


def mark_failed(
    run: RunRecord, message: str, error_type: str, node_id: str | None = None, *, owner: str | None
) -> Commit:
    """Return the commit that ends ``run`` as failed with ``message``, if it is still as seen (status, ``owner``)."""
    return Commit(
        run_id=run.run_id,
        events=[NewEvent(EventType.RUN_FAILED, node_id, {"error": message})],
        run=RunUpdate(status=RunStatus.FAILED, error=message, error_type=error_type, owner=None, lease_until=None),
        expect_status=frozenset({run.status}),
        expect_owner=owner,
    )


async def release_after_failure(
    store: Store,
    run: RunRecord,
    owner: str,
    failure: Exception,
    node_id: str | None = None,
    renewed_lease: float | None = None,
) -> RunRecord | None:
    """Release ``run`` after ``failure``: marked failed when the store allows, else given up here.

    Returns the run as written, or None when it could not be written (or someone else settled it).
    """
    message = (
        f"Stopped because the store failed: {failure}"
        if isinstance(failure, StoreError)
        else f"Stopped by an unexpected error: {type(failure).__name__}: {failure}"
    )
    try:
        result = await store.commit(
            mark_failed(replace(run, status=RunStatus.RUNNING), message, type(failure).__name__, node_id, owner=owner)
        )
        return result.run
    except Conflict:
        return None  # cancelled or taken over meanwhile: no longer this process's to release
    except StoreError:
        pass
    # The latest lease this process wrote: its last commit's, or a later renewal's.
    lease_until = max((x for x in (run.lease_until, renewed_lease) if x is not None), default=None)
    try:
        # Reads often still work when writes do not (a full disk, a read-only file): key the
        # give-up on the lease the store holds, which a renewal may have moved.
        stored = await store.get_run(run.run_id)
    except StoreError:
        stored = None
    if stored is not None:
        if stored.status is not RunStatus.RUNNING or stored.owner != owner:
            return None
        lease_until = stored.lease_until
    give_up(run.run_id, owner, lease_until)
    return None
