"""Claims on a notebook run before a kernel works on it: who may start the process that will.

A process that starts a notebook's kernel (a server starting ``run-notebook``, or ``run-notebook``
itself) first claims the run: in one compare-and-set it becomes the run's owner, leased, with
the run pending. Of several processes racing for one run exactly one wins; the others see a
live owner and leave the run alone. The claimer hands its token to the process it starts (in
``$DURABLE_NB_CLAIM``, or in the kernel's hand-over), which takes the run from that owner, and
from no other live one. A claim whose holder died is taken like any dead owner's run.
"""

from __future__ import annotations

import os

from ...model import Commit, RunRecord, RunStatus, RunUpdate
from ...store.protocol import Conflict, Store
from .ownership import lease_deadline, owner_alive

__all__ = ["CLAIM_VARIABLE", "claim", "claimable", "handed_claim", "unclaim"]

# A child process started to work on a run finds its starter's claim here.
CLAIM_VARIABLE = "DURABLE_NB_CLAIM"

_OPEN = frozenset({RunStatus.PENDING, RunStatus.RUNNING, RunStatus.FAILED, RunStatus.CANCELLED})


def handed_claim() -> str | None:
    """The claim this process was started to take over (and remove it, so its own children do not inherit it)."""
    return os.environ.pop(CLAIM_VARIABLE, None) or None


def claimable(run: RunRecord, handed: str | None = None) -> bool:
    """True if ``run`` may be claimed now: unfinished, and unowned, owned by ``handed`` or by a dead owner."""
    if run.status not in _OPEN:
        return False
    if run.owner is None or (handed is not None and run.owner == handed):
        return True
    return not owner_alive(run.run_id, run.owner, run.lease_until)


async def claim(store: Store, run: RunRecord, owner: str, handed: str | None = None) -> RunRecord | None:
    """Claim ``run`` (as last read) for ``owner``: pending, owned, leased. None if it is not claimable or
    changed since it was read (another process claimed or took it first)."""
    if not claimable(run, handed):
        return None
    try:
        result = await store.commit(
            Commit(
                run_id=run.run_id,
                run=RunUpdate(status=RunStatus.PENDING, owner=owner, lease_until=lease_deadline()),
                expect_status=frozenset({run.status}),
                expect_owner=run.owner,
            )
        )
    except Conflict:
        return None
    return result.run


async def unclaim(store: Store, run_id: str, owner: str) -> bool:
    """Let go of a claim no kernel took: the run is pending and unowned again. False if it moved on."""
    try:
        await store.commit(
            Commit(
                run_id=run_id,
                run=RunUpdate(owner=None, lease_until=None),
                expect_status=frozenset({RunStatus.PENDING}),
                expect_owner=owner,
            )
        )
    except Conflict:
        return False
    return True
