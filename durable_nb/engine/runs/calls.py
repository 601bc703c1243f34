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
    """Return a stored run: status, error, pending gate, and its state on access.

    Args:
        run_id: The run's id.
        store: The store's URL or a Store (default: ``$DURABLE_NB_STORE``, else
            ``.durable_nb/runs.db``); a URL naming no store raises rather than creating one.

    Returns:
        The run, as it is in the store now.

    Raises:
        RunNotFound: No run has that id.
        StoreNotFound: No store exists at the URL.
    """
    return await load_run(resolve_store(store, existing=True), run_id)


get_run = blocking(aget_run)


async def astatus(run_id: str, *, store: Any = None) -> dict[str, Any]:
    """Return ``{run_id, status, node_counts, executions}``, without the workflow's code.

    Args:
        run_id: The run's id.
        store: The store's URL or a Store (default: ``$DURABLE_NB_STORE``, else ``.durable_nb/runs.db``).

    Returns:
        The run's status, its nodes counted by status (pending, running, ok, failed, skipped,
        suspended, cancelled) and every execution with its address (node, branch, iteration, item).

    Raises:
        RunNotFound: No run has that id.
    """
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

    Exactly one of many concurrent deciders wins; the others get AlreadyResumed. Needs no workflow
    code: the run waits as ``pending`` until ``flow.resume(run_id)``, the service or ``recover``
    continues it (``flow.approve`` decides and continues in one call).

    Args:
        run_id: The paused run.
        node: The gate's node, needed only when gates wait at several nodes.
        value: Any JSON value handed back with the decision (``Decision.value``).
        comment: Why, recorded with the decision.
        by: Who decides (default: the user name of this process).
        store: The store's URL or a Store (default: ``$DURABLE_NB_STORE``, else ``.durable_nb/runs.db``).
        approved: False records a rejection.

    Returns:
        The run, with the decision recorded.

    Raises:
        AlreadyResumed: Someone else decided first.
        UnknownGate: No gate waits at ``node`` (the message names those that wait).
        NotResumable: The run waits at no gate.
        RunNotFound: No run has that id.

    Example:
        >>> dnb.approve(run.id, comment="refund is right")
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
    """Reject the gate a run waits at; ``gate()`` then returns a decision with approved=False.

    Takes the arguments of :func:`approve` but ``approved``, and raises the same errors.
    """
    return await aapprove(run_id, node=node, value=value, comment=comment, by=by, store=store, approved=False)


reject = blocking(areject)


async def acancel(run_id: str, *, store: Any = None) -> Run:
    """Cancel a pending, running or paused run; it keeps its checkpoints and stays resumable.

    A running run stops mid-node wherever it runs (this process, another, another machine): the
    node in flight is abandoned and not committed.

    Args:
        run_id: The run to cancel.
        store: The store's URL or a Store (default: ``$DURABLE_NB_STORE``, else ``.durable_nb/runs.db``).

    Returns:
        The run, now ``cancelled``.

    Raises:
        NotCancellable: The run already finished.
        RunNotFound: No run has that id.
    """
    resolved = resolve_store(store, existing=True)
    return await load_run(resolved, run_id, await cancel_run(resolved, run_id))


cancel = blocking(acancel)


async def afork(run_id: str, checkpoint_id: str | None = None, state: Any = None, *, store: Any = None) -> Run:
    """Create (without running) a new run branched from a checkpoint, with state overrides.

    The fork is ``pending``; the workflow's ``resume(fork.id)`` runs it (``flow.fork`` creates and
    runs it in one call). The original run is never touched.

    Args:
        run_id: The run to branch from.
        checkpoint_id: The checkpoint the fork starts from (default: the run's latest).
        state: Values to change, name to value; each must keep its type.
        store: The store's URL or a Store (default: ``$DURABLE_NB_STORE``, else ``.durable_nb/runs.db``).

    Returns:
        The new run, ``pending``, whose ``parent_run_id`` and ``parent_checkpoint_id`` name where it
        branched.

    Raises:
        CheckpointNotFound: The run has no checkpoint with that id.
        InvalidState: ``state`` is not a dict of names, or sets one of the engine's own (``__…``).
        RunNotFound: No run has that id.
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

    Args:
        older_than: A ``timedelta`` (that long ago), a ``datetime``, or a number of seconds.
        store: The store's URL or a Store (default: ``$DURABLE_NB_STORE``, else ``.durable_nb/runs.db``).

    Returns:
        The counts of what was deleted (checkpoints, events, idempotent results, values) and the
        bytes freed.

    Raises:
        InvalidInput: ``older_than`` is none of those, or negative.

    Example:
        >>> from datetime import timedelta
        >>> dnb.prune(older_than=timedelta(days=30))
    """
    return await resolve_store(store, existing=True).prune(_cutoff(older_than))


prune = blocking(aprune)
