"""Module-level calls on stored runs, usable without the workflow's code."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

from ..._loop import blocking
from ...model import PruneReport
from ...store import resolve_store
from ...store.secret import load_secret
from ..forks.forking import create_fork
from ..gates.decisions import current_run, decide, make_decision
from ..state.values import ValueCodec
from .cancel import cancel_run
from .run import Run, load_run
from .status import describe

__all__ = [
    "aapprove",
    "acancel",
    "afork",
    "aget_run",
    "approve",
    "aprune",
    "areject",
    "cancel",
    "fork",
    "get_run",
    "prune",
    "reject",
    "astatus",
    "status",
]


async def aget_run(run_id: str, *, store: Any = None) -> Run:
    """Return a stored run: status, error, pending gate, and its state on access."""
    return await load_run(resolve_store(store, existing=True), run_id)


get_run = blocking(aget_run)


async def astatus(run_id: str, *, store: Any = None) -> dict[str, Any]:
    """Return ``{run_id, status, node_counts, executions}``, without the workflow's code."""
    resolved = resolve_store(store, existing=True)
    return describe(await current_run(resolved, run_id), await resolved.status_rows(run_id))


status = blocking(astatus)


async def aapprove(
    run_id: str,
    *,
    node: str | None = None,
    value: Any = None,
    comment: str | None = None,
    by: str | None = None,
    store: Any = None,
    approved: bool = True,
) -> Run:
    """Approve the gate a run waits at (``approved=False``: reject it); the run continues when a
    process with its code resumes it.

    Exactly one of many concurrent deciders wins; the others get AlreadyResumed.
    """
    resolved = resolve_store(store, existing=True)
    decision = make_decision(approved, value, comment, by)
    result = await decide(resolved, run_id, decision, node)
    return await load_run(resolved, run_id, result.run)


approve = blocking(aapprove)


async def areject(
    run_id: str,
    *,
    node: str | None = None,
    value: Any = None,
    comment: str | None = None,
    by: str | None = None,
    store: Any = None,
) -> Run:
    """Reject the gate a run waits at; ``gate()`` then returns a decision with approved=False."""
    return await aapprove(run_id, node=node, value=value, comment=comment, by=by, store=store, approved=False)


reject = blocking(areject)


async def acancel(run_id: str, *, store: Any = None) -> Run:
    """Cancel a pending, running or paused run; it keeps its checkpoints and stays resumable."""
    resolved = resolve_store(store, existing=True)
    return await load_run(resolved, run_id, await cancel_run(resolved, run_id))


cancel = blocking(acancel)


async def afork(run_id: str, checkpoint_id: str | None = None, state: Any = None, *, store: Any = None) -> Run:
    """Create (without running) a new run branched from a checkpoint, with state overrides.

    The fork is ``pending``; the workflow's ``resume(fork.id)`` runs it.
    """
    resolved = resolve_store(store, existing=True)
    fork = await create_fork(resolved, ValueCodec(resolved, load_secret()), run_id, checkpoint_id, state)
    return await load_run(resolved, fork.run.run_id, fork.run)


fork = blocking(afork)


def _cutoff(older_than: float | timedelta | datetime) -> float:
    if isinstance(older_than, datetime):
        return older_than.timestamp()
    if isinstance(older_than, timedelta):
        return time.time() - older_than.total_seconds()
    if isinstance(older_than, (int, float)) and not isinstance(older_than, bool) and older_than >= 0:
        return time.time() - float(older_than)
    from ...errors import InvalidInput

    raise InvalidInput(f"older_than must be a timedelta, a datetime or a number of seconds >= 0, not {older_than!r}.")


async def aprune(older_than: float | timedelta | datetime, *, store: Any = None) -> PruneReport:
    """Delete finished runs' history older than ``older_than`` and collect unreferenced values.

    Never touches paused runs or gate checkpoints; keeps what resume and forks still need.
    """
    return await resolve_store(store, existing=True).prune(_cutoff(older_than))


prune = blocking(aprune)
