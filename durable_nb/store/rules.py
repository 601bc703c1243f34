"""Rules every backend applies inside a commit's transaction, written once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import AlreadyResumed, InvalidDecision, InvalidInput
from ..model import UNCHANGED, Commit, RunRecord, RunStatus
from ..model.records import evolve
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
    changes: dict[str, object] = {
        "updated_at": now,
        "head_seq": run.head_seq + checkpoints,
        "event_seq": run.event_seq + events,
    }
    if commit.run is not None:
        for name in ("status", "error", "error_type", "owner", "lease_until"):
            value = getattr(commit.run, name)
            if value is not UNCHANGED:
                changes[name] = value
    if commit.claim is not None and commit.status_after_claim is not None:
        if still_pending:
            changes.update(status=RunStatus.PAUSED, owner=None, lease_until=None)
        else:
            changes["status"] = commit.status_after_claim
    return evolve(run, **changes)
