"""Rules every backend applies inside a commit's transaction, written once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import AlreadyResumed, InvalidDecision, InvalidInput
from ..model import UNCHANGED, Commit, RunRecord, RunStatus
from .protocol import Conflict

if TYPE_CHECKING:
    from ..model import PendingInterrupt

__all__ = [
    "ANY_NODE",
    "check_event_seq",
    "check_expectations",
    "check_run_id",
    "choose_claim",
    "trusted_seen",
    "updated_run",
    "writes_only",
]

ANY_NODE = "*"
# Sequence numbers are 64-bit signed integers in both databases.
_MAX_SEQ = 2**63 - 1


def check_run_id(run_id: object) -> None:
    """Raise InvalidInput unless ``run_id`` is a non-empty string."""
    if not isinstance(run_id, str) or not run_id:
        raise InvalidInput(f"A run id is text such as '0192…-…' (see durable_nb.runs()), not {run_id!r}.")


def check_event_seq(after_seq: object) -> None:
    """Raise InvalidInput unless ``after_seq`` is a whole number from 0 to 2**63 - 1 (what the databases hold)."""
    if isinstance(after_seq, bool) or not isinstance(after_seq, int) or not 0 <= after_seq <= _MAX_SEQ:
        raise InvalidInput(
            f"after= is an event's sequence number, a whole number from 0 to {_MAX_SEQ}, not {after_seq!r}; "
            "pass 0 for every event, or the last sequence number seen."
        )


def check_expectations(run: RunRecord, commit: Commit) -> None:
    """Raise Conflict when the run is no longer in the status or hands the commit expects."""
    if commit.expect_status is not None and run.status not in commit.expect_status:
        wanted = ", ".join(sorted(s.value for s in commit.expect_status))
        raise Conflict(run, f"Run {run.run_id} is {run.status.value}, expected {wanted}.")
    if commit.expect_owner is not UNCHANGED and run.owner != commit.expect_owner:
        raise Conflict(run, f"Run {run.run_id} is owned by {run.owner!r}, not {commit.expect_owner!r}.")
    if commit.expect_head_seq is not None and run.head_seq != commit.expect_head_seq:
        raise Conflict(run, f"Run {run.run_id} has checkpoint {run.head_seq}, expected {commit.expect_head_seq}.")


def writes_only(commit: Commit) -> RunRecord | None:
    """Return the run the committer saw if the commit stores pending writes (and their values) and
    nothing else: such a commit leaves the run row as it is, and checks only that the run exists."""
    if (
        not commit.writes
        or commit.seen is None
        or commit.checkpoints
        or commit.events
        or commit.run is not None
        or commit.open_interrupts
        or commit.claim is not None
        or commit.release_interrupts
        or commit.idempotent
        or commit.expect_status is not None
        or commit.expect_owner is not UNCHANGED
        or commit.expect_head_seq is not None
    ):
        return None
    return commit.seen


def trusted_seen(commit: Commit) -> RunRecord | None:
    """Return the run the committer saw, if a conditional update on it can replace reading the row."""
    seen = commit.seen
    if seen is None or commit.claim is not None:
        return None
    try:
        check_expectations(seen, commit)
    except Conflict:
        return None  # read the row to report the conflict as it stands
    return seen


def choose_claim(
    run_id: str, node_id: str, pending: list[PendingInterrupt], gate: str | None = None
) -> PendingInterrupt:
    """Pick the pending interrupt a claim names (``gate``: only the one that checkpoint opened);
    raise AlreadyResumed when there is none."""
    if gate is not None:
        pending = [p for p in pending if p.checkpoint_id == gate]
    if node_id == ANY_NODE:
        if len(pending) > 1:
            names = ", ".join(sorted(p.node_id for p in pending))
            raise InvalidDecision(f"Run {run_id} waits at {len(pending)} gates ({names}); say which one with node=…")
        if pending:
            return pending[0]
    else:
        for item in pending:
            if item.node_id == node_id:
                return item
    where = "" if node_id == ANY_NODE else f" at node {node_id!r}"
    if gate is not None:
        where = f"{where} opened by checkpoint {gate}"
    raise AlreadyResumed(
        f"Run {run_id} has no open gate{where}: it was already decided (by another process or "
        "person) or was never paused there. Check its status with durable_nb.get_run(run_id)."
    )


def updated_run(
    run: RunRecord, commit: Commit, now: float, checkpoints: int, events: int, still_pending: int = 0
) -> RunRecord:
    """Return the run row as the commit leaves it (``still_pending``: gates left after a claim)."""
    # Built field by field, not with dataclasses.replace: this is on every commit's path, and
    # replace() reads each of the row's fields by name.
    status, error, error_type, owner, lease_until = run.status, run.error, run.error_type, run.owner, run.lease_until
    update = commit.run
    if update is not None:
        if update.status is not UNCHANGED:
            status = update.status
        if update.error is not UNCHANGED:
            error = update.error
        if update.error_type is not UNCHANGED:
            error_type = update.error_type
        if update.owner is not UNCHANGED:
            owner = update.owner
        if update.lease_until is not UNCHANGED:
            lease_until = update.lease_until
    if commit.claim is not None and commit.status_after_claim is not None:
        if still_pending:
            status, owner, lease_until = RunStatus.PAUSED, None, None
        else:
            status = commit.status_after_claim
    return RunRecord(
        run.run_id,
        run.name,
        run.kind,
        status,
        run.created_at,
        now,
        run.input_manifest,
        error,
        error_type,
        run.idempotency_key,
        run.parent_run_id,
        run.parent_checkpoint_id,
        owner,
        lease_until,
        run.head_seq + checkpoints,
        run.event_seq + events,
        run.meta,
    )
