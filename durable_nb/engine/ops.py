"""Operations on stored runs that need no workflow code: decide, cancel, fork, load."""

from __future__ import annotations

import getpass
import time
from dataclasses import dataclass
from typing import Any

from .._ids import new_id
from ..errors import AlreadyResumed, InvalidDecision, NotCancellable, NotResumable
from ..model import (
    CheckpointDraft,
    CheckpointRecord,
    CheckpointStatus,
    Commit,
    CommitResult,
    Decision,
    EventType,
    NewEvent,
    NewRun,
    PendingInterrupt,
    RunRecord,
    RunStatus,
    RunUpdate,
    format_seconds,
    step_name,
)
from ..store import codec
from ..store.protocol import Conflict, Store
from ..store.rules import ANY_NODE, choose_claim
from ..store.secret import load_secret
from .run import Run
from .values import ValueCodec, check_state
from .watch import notify_cancelled

__all__ = [
    "CANCELLED",
    "CANCELLED_MESSAGE",
    "cancel_run",
    "create_fork",
    "decisions_of",
    "load_run",
    "make_decision",
    "record_decision",
]

CANCELLED_MESSAGE = "Cancelled by user"
# What every cancel (a call, an interrupted node or cell) does to the run row.
CANCELLED = RunUpdate(
    status=RunStatus.CANCELLED, error=CANCELLED_MESSAGE, error_type="Cancelled", owner=None, lease_until=None
)


def _default_by() -> str | None:
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
    return Decision(approved=approved, value=value, comment=comment, by=by if by is not None else _default_by())


def decisions_of(checkpoint: CheckpointRecord | None) -> dict[str, list[Decision]]:
    """Return the decisions a checkpoint carries for nodes that have not finished yet."""
    if checkpoint is None:
        return {}
    return {node: [Decision.from_json(d) for d in items] for node, items in checkpoint.resumes.items()}


async def load_run(store: Store, run_id: str, record: RunRecord | None = None) -> Run:
    """Return a Run whose state loads from its latest checkpoint on first access."""
    record = record or await store.get_run(run_id)
    if record.status is RunStatus.PAUSED:
        # Re-read even when another looker applied the deadline first.
        await expire_gates(store, run_id)
        record = await store.get_run(run_id)
    pending = await store.pending_interrupts(run_id) if record.status is RunStatus.PAUSED else []

    async def load_state() -> dict[str, Any]:
        return await ValueCodec(store, load_secret()).load((await store.state_at(run_id)).manifest)

    return Run(record, pending=pending, load_state=load_state)


TIMEOUT_BY = "durable_nb (gate timeout)"


async def expire_gates(store: Store, run_id: str | None = None) -> list[PendingInterrupt]:
    """Apply the on_timeout policy of every expired gate (of one run, or all); return them.

    Nothing waits for a gate to expire: whoever next looks at the run applies its deadline.
    """
    expired = await store.expired_interrupts(time.time(), run_id)
    for pending in expired:
        await apply_expiry(store, pending)
    return expired


async def apply_expiry(store: Store, pending: PendingInterrupt) -> None:
    """Reject an expired gate, or fail its run, as its ``on_timeout`` says; losing a race is fine."""
    waited = (pending.expires_at or pending.created_at) - pending.created_at
    note = f"Gate {pending.reason!r} of node {pending.node_id!r} timed out after {format_seconds(waited)}"
    try:
        if pending.on_timeout == "fail":
            await _fail_on_timeout(store, pending, note)
        else:
            decision = Decision(approved=False, value=None, comment=note, by=TIMEOUT_BY)
            await record_decision(store, pending.run_id, decision, pending.node_id, allow_expired=True)
    except (AlreadyResumed, Conflict):
        pass


async def _fail_on_timeout(store: Store, pending: PendingInterrupt, note: str) -> None:
    head = await store.resume_point(pending.run_id)
    if head is None:
        return
    message = f"Node '{pending.node_id}' failed: {note}"
    common = {
        "skipped": head.skipped,
        "routes": head.routes,
        "resumes": head.resumes,
        "counters": head.counters,
        "error": message,
        "error_type": "GateTimeout",
    }
    failed = CheckpointDraft(
        checkpoint_id=new_id(),
        step=step_name("failed", pending.node_id),
        node_id=pending.node_id,
        status=CheckpointStatus.FAILED,
        queue=[pending.node_id] + [n for n in head.queue if n != pending.node_id],
        parent_checkpoint_id=head.checkpoint_id,
        **common,
    )
    end = CheckpointDraft(
        checkpoint_id=new_id(),
        step="run_end",
        node_id=None,
        status=CheckpointStatus.FAILED,
        queue=[],
        parent_checkpoint_id=failed.checkpoint_id,
        **common,
    )
    await store.commit(
        Commit(
            run_id=pending.run_id,
            checkpoints=[failed, end],
            events=[
                NewEvent(EventType.GATE_DECIDED, pending.node_id, {"timed_out": True, "on_timeout": "fail"}),
                NewEvent(EventType.RUN_FAILED, pending.node_id, {"error": message}),
            ],
            run=RunUpdate(
                status=RunStatus.FAILED, error=message, error_type="GateTimeout", owner=None, lease_until=None
            ),
            claim=pending.node_id,
            release_interrupts=True,
            expect_status=frozenset({RunStatus.PAUSED}),
            expect_head_seq=head.seq,
        )
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


async def record_decision(
    store: Store,
    run_id: str,
    decision: Decision,
    node: str | None = None,
    *,
    continue_as: str | None = None,
    lease_until: float | None = None,
    allow_expired: bool = False,
) -> CommitResult:
    """Claim the run's pending gate and write ``approved:<node>`` in one transaction.

    With ``continue_as`` (an owner token), the same transaction hands the run to that owner
    to continue; otherwise the run waits as ``pending`` for a process that has its code.
    """
    if not allow_expired:
        expired = [p for p in await expire_gates(store, run_id) if node in (None, p.node_id)]
        if expired and not (node is None and await store.pending_interrupts(run_id)):
            raise _expired_error(run_id, expired[0])
    while True:
        run = await store.get_run(run_id)
        if run.status is not RunStatus.PAUSED:
            raise _not_paused(run)
        target = choose_claim(run_id, node or ANY_NODE, await store.pending_interrupts(run_id))
        if not allow_expired and target.expires_at is not None and target.expires_at <= time.time():
            await apply_expiry(store, target)
            raise _expired_error(run_id, target)
        head = await store.resume_point(run_id)
        if head is None:
            raise _not_paused(run)
        try:
            return await store.commit(_decision_commit(run_id, head, target, decision, continue_as, lease_until))
        except Conflict as conflict:
            if conflict.run.status is not RunStatus.PAUSED:
                raise _not_paused(conflict.run) from None
            # Another gate of the same run was decided meanwhile: build on its checkpoint.


def _decision_commit(
    run_id: str,
    head: CheckpointRecord,
    target: PendingInterrupt,
    decision: Decision,
    continue_as: str | None,
    lease_until: float | None,
) -> Commit:
    resumes = {k: list(v) for k, v in head.resumes.items()}
    resumes.setdefault(target.node_id, []).append(decision.to_json())
    draft = CheckpointDraft(
        checkpoint_id=new_id(),
        step=step_name("approved", target.node_id),
        node_id=target.node_id,
        status=CheckpointStatus.APPROVED,
        queue=head.queue,
        skipped=head.skipped,
        routes=head.routes,
        parent_checkpoint_id=head.checkpoint_id,
        decision=decision.to_json(),
        resumes=resumes,
        counters=head.counters,
        agent_path=target.agent_path,
        extra={k: v for k, v in head.extra.items() if k == "wave_writes"},
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
        status_after_claim=RunStatus.RUNNING if continue_as else RunStatus.PENDING,
        expect_status=frozenset({RunStatus.PAUSED}),
        expect_head_seq=head.seq,
    )


async def cancel_run(store: Store, run_id: str) -> RunRecord:
    """Cancel a run: settle a paused or pending one, abandon the node of a running one."""
    await expire_gates(store, run_id)
    while True:
        run = await store.get_run(run_id)
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
        except Conflict:
            continue  # the run moved on meanwhile: look again
        # A runner of this process stops at once; one elsewhere notices at its next poll.
        notify_cancelled(run_id)
        return result.run


@dataclass(slots=True)
class Fork:
    """A created fork: its run and its first checkpoint."""

    run: RunRecord
    checkpoint: CheckpointRecord


async def create_fork(
    store: Store,
    values: ValueCodec,
    run_id: str,
    checkpoint_id: str | None = None,
    overrides: Any = None,
    *,
    owner: str | None = None,
    lease_until: float | None = None,
    first_events: list[NewEvent] | None = None,
) -> Fork:
    """Create a run branched from a checkpoint of ``run_id``; the original is untouched."""
    source_run = await store.get_run(run_id)
    if checkpoint_id is None:
        source = await store.resume_point(run_id)
        if source is None:
            raise NotResumable(
                f"Run {run_id} has no checkpoint to fork from yet; let it commit a node first, or start a new run."
            )
    else:
        source = await store.get_checkpoint(run_id, checkpoint_id)
    changes = check_state(overrides, "Fork state overrides")
    delta, blobs = values.encode(changes)
    new_run_id = new_id()
    # The fork's state is its parent's at the fork point (read through it, never copied) and this.
    draft = CheckpointDraft(
        checkpoint_id=new_id(),
        step=step_name("fork", source.node_id or "run_end"),
        node_id=source.node_id,
        status=CheckpointStatus.FORK,
        changes=dict(delta),
        queue=source.queue,
        skipped=source.skipped,
        routes=source.routes,
        parent_checkpoint_id=source.checkpoint_id,
        resumes=source.resumes,
        counters=source.counters,
        agent_path=source.agent_path,
        node_output=delta,
        extra={"overrides": sorted(changes), "forked_from": {"run_id": run_id, "step": source.step, "seq": source.seq}},
    )
    record, _ = await store.create_run(
        NewRun(
            run_id=new_run_id,
            name=source_run.name,
            kind=source_run.kind,
            status=RunStatus.RUNNING if owner else RunStatus.PENDING,
            input_manifest=source_run.input_manifest,
            blobs=blobs,
            parent_run_id=run_id,
            parent_checkpoint_id=source.checkpoint_id,
            owner=owner,
            lease_until=lease_until,
            meta=dict(source_run.meta),
            checkpoints=[draft],
            events=[
                NewEvent(EventType.FORK_CREATED,
                    source.node_id,
                    {
                        "parent_run_id": run_id,
                        "parent_checkpoint_id": source.checkpoint_id,
                        "overrides": sorted(changes),
                    },
                )
            ]
            + (first_events or []),
        )
    )
    values.mark_stored(blobs)
    checkpoint = await store.head_checkpoint(new_run_id)
    assert checkpoint is not None
    return Fork(record, checkpoint)
