"""Deciding gates, by a person or by a deadline: one call claims the gate and writes the decision.

Every front end (the gate panel, ``%durable approve``, the command line, ``durable_nb.approve``,
``flow.approve``) goes through ``decide``: it claims the gate inside the commit's transaction
(by node, and by the checkpoint that opened it when the caller knows it) and returns what it
wrote, so that nobody reads the decision back.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from ...errors import AlreadyResumed, DurableError, InvalidDecision, UnknownGate
from ...model import (
    CheckpointRecord,
    CheckpointStatus,
    Commit,
    CommitResult,
    EventType,
    NewEvent,
    RunRecord,
    RunStatus,
    RunUpdate,
    format_seconds,
)
from ...store import codec
from ...store.protocol import Conflict, Store
from ...store.rules import ANY_NODE, choose_claim
from ..runs.ownership import lease_deadline
from ..state.values import refuse_reserved

if TYPE_CHECKING:
    from ...model import Decision, PendingInterrupt

__all__ = [
    "TIMEOUT_BY",
    "apply_expiry",
    "current_run",
    "decide",
    "decisions_of",
    "default_by",
    "expire_gates",
    "latest_decision",
    "make_decision",
    "open_gate",
]

# Who decides a gate whose deadline passed with on_timeout="reject".
TIMEOUT_BY = "durable_nb (gate timeout)"

# What a decision's checkpoint keeps of the head it follows: a wave's writes, and the code and
# its hash a cell's gate was opened with (from the gate's own checkpoint).
_CARRIED = ("wave_writes", "source", "source_hash")

# A decision is read by every process that continues the run: it stays small.
MAX_DECISION_VALUE_BYTES = 1 << 20


def default_by() -> str | None:
    """Return who decides when nobody says: the user this process runs as (None if unknown)."""
    import getpass  # only a decision asks (it loads termios): attaching does not

    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name is not worth failing an approval for
        return None


def make_decision(approved: Any, value: Any = None, comment: Any = None, by: Any = None) -> Decision:
    """Validate the fields of a decision and build it; raise InvalidDecision."""
    if not isinstance(approved, bool):
        raise InvalidDecision(f"approved must be True or False, not {approved!r}.")
    if comment is not None and not isinstance(comment, str):
        raise InvalidDecision(f"comment must be text or None, not {type(comment).__name__}.")
    if by is not None and not isinstance(by, str):
        raise InvalidDecision(f"by must be a name (text) or None, not {type(by).__name__}.")
    if not codec.is_plain(value):
        raise InvalidDecision(
            f"A decision's value must be JSON data (None, bool, number, text, lists, dicts with "
            f"text keys) so that any process can read it; got {type(value).__name__}."
        )
    try:
        size = len(json.dumps(value))
    except ValueError as error:  # an int too long to write as text, for one
        raise InvalidDecision(f"A decision's value cannot be written as JSON: {error}.") from None
    if size > MAX_DECISION_VALUE_BYTES:
        raise InvalidDecision(
            f"A decision's value is {size:,} bytes as JSON; the limit is {MAX_DECISION_VALUE_BYTES:,}. "
            "Store large data in the run's state and pass a reference."
        )
    if isinstance(value, dict):
        # A node may return its gate's value as state: an approver must not reach the engine's names.
        refuse_reserved(value, "A decision's value", InvalidDecision)
    from ...model import Decision

    return Decision(approved=approved, value=value, comment=comment, by=by if by is not None else default_by())


def decisions_of(checkpoint: CheckpointRecord | None) -> dict[str, list[Decision]]:
    """Return the decisions a checkpoint carries for nodes that have not finished yet."""
    if checkpoint is None or not checkpoint.resumes:
        return {}  # most checkpoints: the records of decisions need not even be defined
    from ...model import Decision

    return {node: [Decision.from_json(d) for d in items] for node, items in checkpoint.resumes.items()}


async def current_run(store: Store, run_id: str, seen: RunRecord | None = None) -> RunRecord:
    """Return the run row (``seen``, if just read), after applying the deadlines of its gates that
    have passed. A paused run is read again when its gates show it moved on meanwhile (another
    looker applied a deadline, someone decided), so that no caller reports a stale pause."""
    run = seen if seen is not None else await store.get_run(run_id)
    if run.status is not RunStatus.PAUSED:
        return run
    pending = await store.pending_interrupts(run_id)
    expired = await _apply_passed(store, pending)
    return await store.get_run(run_id) if expired or not pending else run


async def open_gate(store: Store, run_id: str, node: str, reason: str | None = None) -> PendingInterrupt | None:
    """Return the gate of ``node`` (asking ``reason``) that the run waits at, if it still waits."""
    for pending in await store.pending_interrupts(run_id):
        if pending.node_id == node and reason in (None, pending.reason):
            return pending
    return None


async def latest_decision(store: Store, run_id: str, node: str) -> Decision | None:
    """Return the latest decision recorded at the gates of ``node``, if any."""
    from ...model import Decision

    checkpoint = await store.node_checkpoint(run_id, node, "approved:")
    return None if checkpoint is None or checkpoint.decision is None else Decision.from_json(checkpoint.decision)


async def decide(
    store: Store,
    run_id: str,
    decision: Decision,
    node: str | None = None,
    *,
    gate: str | None = None,
    continue_as: str | None = None,
    lease_until: float | None = None,
) -> CommitResult:
    """Claim a run's open gate and write ``approved:<node>`` in one transaction; return what it wrote.

    ``node`` names the gate's node (None: the run's only open gate); ``gate``, the checkpoint that
    opened it, makes sure that a later gate of the same node is not decided by mistake. Exactly
    one of many concurrent deciders wins; the others get AlreadyResumed. With ``continue_as``
    (an owner token) the same transaction hands the run to that owner, leased until
    ``lease_until`` (default: a fresh lease); otherwise the run waits as ``pending`` for a
    process that has its code. The decision's checkpoint carries the code a notebook cell's gate
    was opened with, so that whoever continues the cell reads nothing more.
    """
    if continue_as is not None and lease_until is None:
        lease_until = lease_deadline()
    if node is not None and not isinstance(node, str):
        raise InvalidDecision(f"node= names the gated node (text), or None for the run's only gate; not {node!r}.")
    while True:
        pending = await store.pending_interrupts(run_id)
        target = await _open_target(store, run_id, pending, node, gate)
        head = await store.resume_point(run_id)
        if head is None:
            raise _not_paused(await store.get_run(run_id))
        try:
            return await store.commit(_decision_commit(run_id, head, target, decision, continue_as, lease_until))
        except Conflict as conflict:
            if conflict.run.status is not RunStatus.PAUSED:
                raise _not_paused(conflict.run) from None
            # Another gate of the same run was decided meanwhile: build on its checkpoint.


async def _open_target(
    store: Store, run_id: str, pending: list[PendingInterrupt], node: str | None, gate: str | None
) -> PendingInterrupt:
    """Pick the gate a decision is for, applying the deadlines of gates that have passed."""
    if not pending:
        raise _not_paused(await store.get_run(run_id))
    expired = await _apply_passed(store, pending)
    still_open = [p for p in pending if p not in expired]
    wanted = [p for p in expired if node in (None, p.node_id) and gate in (None, p.checkpoint_id)]
    if wanted and not (node is None and gate is None and still_open):
        raise _expired_error(run_id, wanted[0])
    if not still_open:
        raise _not_paused(await store.get_run(run_id))
    if node is not None and all(p.node_id != node for p in still_open):
        raise await _no_gate_at(store, run_id, node, still_open)
    return choose_claim(run_id, node or ANY_NODE, still_open, gate)


async def _no_gate_at(store: Store, run_id: str, node: str, waiting: list[PendingInterrupt]) -> DurableError:
    """The error for a decision at ``node`` where no gate waits: decided already, or never a gate there."""
    gates = ", ".join(f"{p.node_id!r} (asking {p.reason!r})" for p in sorted(waiting, key=lambda p: p.node_id))
    listed = f"node{'s' if len(waiting) > 1 else ''} {gates}"
    if await store.node_checkpoint(run_id, node, "approved:") is not None:
        # Another decider won the race for this gate: the same answer as for a run no longer paused.
        return AlreadyResumed(
            f"Run {run_id}'s gate at node {node!r} was already decided (by another process or person); "
            f"it now waits at {listed}."
        )
    return UnknownGate(
        f"Run {run_id} has no gate waiting at node {node!r}; it waits at {listed}. Name one of those as the "
        "node to decide (leave the node out when only one gate waits)."
    )


def _decision_commit(
    run_id: str,
    head: CheckpointRecord,
    target: PendingInterrupt,
    decision: Decision,
    continue_as: str | None,
    lease_until: float | None,
) -> Commit:
    from ..state.drafts import draft_after  # deciding is rare next to attaching, which loads this module

    resumes = {k: list(v) for k, v in head.resumes.items()}
    resumes.setdefault(target.node_id, []).append(decision.to_json())
    # The head is the gate's own checkpoint when nothing was written after it (a notebook cell's gate).
    gate_head = head.checkpoint_id == target.checkpoint_id
    draft = draft_after(
        head,
        "approved",
        target.node_id,
        CheckpointStatus.APPROVED,
        decision=decision.to_json(),
        resumes=resumes,
        agent_path=target.agent_path,
        extra={k: v for k, v in head.extra.items() if k in _CARRIED and (k == "wave_writes" or gate_head)},
    )
    detail = {"approved": decision.approved, "by": decision.by}
    if decision.by == TIMEOUT_BY:
        detail.update(timed_out=True, on_timeout="reject")
    events = [NewEvent(EventType.GATE_DECIDED, target.node_id, detail)]
    if continue_as is not None:
        events.append(NewEvent(EventType.NODE_STARTED, target.node_id))
    return Commit(
        run_id=run_id,
        checkpoints=[draft],
        events=events,
        run=RunUpdate(owner=continue_as, lease_until=lease_until, error=None, error_type=None),
        claim=target.node_id,
        claim_gate=target.checkpoint_id,
        status_after_claim=RunStatus.RUNNING if continue_as else RunStatus.PENDING,
        expect_status=frozenset({RunStatus.PAUSED}),
        expect_head_seq=head.seq,
    )


# -- deadlines ------------------------------------------------------------------------------


async def expire_gates(store: Store, run_id: str | None = None) -> list[PendingInterrupt]:
    """Apply the on_timeout policy of every expired gate (of one run, or all); return them.

    Nothing waits for a gate to expire: whoever next looks at the run applies its deadline.
    """
    expired = await store.expired_interrupts(time.time(), run_id)
    for pending in expired:
        await apply_expiry(store, pending)
    return expired


async def _apply_passed(store: Store, pending: list[PendingInterrupt]) -> list[PendingInterrupt]:
    """Apply the deadlines that have passed among ``pending``; return those gates."""
    now = time.time()
    expired = [p for p in pending if p.expires_at is not None and p.expires_at <= now]
    for passed in expired:
        await apply_expiry(store, passed)
    return expired


async def apply_expiry(store: Store, pending: PendingInterrupt) -> None:
    """Reject an expired gate, or fail its run, as its ``on_timeout`` says; losing a race is fine."""
    waited = (pending.expires_at or pending.created_at) - pending.created_at
    note = f"Gate {pending.reason!r} of node {pending.node_id!r} timed out after {format_seconds(waited)}"
    while True:
        head = await store.resume_point(pending.run_id)
        if head is None:
            return
        if pending.on_timeout == "fail":
            commit = _failed_by_deadline(pending, head, note)
        else:
            from ...model import Decision

            decision = Decision(approved=False, value=None, comment=note, by=TIMEOUT_BY)
            commit = _decision_commit(pending.run_id, head, pending, decision, None, None)
        try:
            await store.commit(commit)
            return
        except AlreadyResumed:
            return  # decided or expired by someone else first
        except Conflict as conflict:
            if conflict.run.status is not RunStatus.PAUSED:
                return
            # Another gate of the same run was decided meanwhile: build on its checkpoint.


def _failed_by_deadline(pending: PendingInterrupt, head: CheckpointRecord, note: str) -> Commit:
    from ..state.drafts import draft_after

    message = f"Node '{pending.node_id}' failed: {note}"
    failed = draft_after(
        head,
        "failed",
        pending.node_id,
        CheckpointStatus.FAILED,
        queue=[pending.node_id] + [n for n in head.queue if n != pending.node_id],
        error=message,
        error_type="GateTimeout",
    )
    end = draft_after(
        head,
        "run_end",
        None,
        CheckpointStatus.FAILED,
        queue=[],
        parent_checkpoint_id=failed.checkpoint_id,
        error=message,
        error_type="GateTimeout",
    )
    return Commit(
        run_id=pending.run_id,
        checkpoints=[failed, end],
        events=[
            NewEvent(EventType.GATE_DECIDED, pending.node_id, {"timed_out": True, "on_timeout": "fail"}),
            NewEvent(EventType.RUN_FAILED, pending.node_id, {"error": message}),
        ],
        run=RunUpdate(status=RunStatus.FAILED, error=message, error_type="GateTimeout", owner=None, lease_until=None),
        claim=pending.node_id,
        claim_gate=pending.checkpoint_id,
        release_interrupts=True,
        expect_status=frozenset({RunStatus.PAUSED}),
        expect_head_seq=head.seq,
    )


def _expired_error(run_id: str, pending: PendingInterrupt) -> AlreadyResumed:
    return AlreadyResumed(
        f"The gate {pending.reason!r} of run {run_id} expired before this decision (its on_timeout "
        f"is {pending.on_timeout!r}); the decision was not recorded. See durable_nb.get_run(run_id)."
    )


def _not_paused(run: RunRecord) -> Exception:
    if run.status is RunStatus.COMPLETED:
        return AlreadyResumed(f"Run {run.run_id} already completed; there is no gate left to decide.")
    return AlreadyResumed(
        f"Run {run.run_id} is {run.status.value}, not paused at a gate: its gate was already "
        "decided, or it never paused. Check it with durable_nb.get_run(run_id)."
    )
