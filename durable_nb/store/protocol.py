"""The store protocol every backend implements, and its conformance rules.

All methods are coroutines; the sync API drives them through ``durable_nb._loop``.
A backend must make ``commit`` one transaction: its checks run first, and when any
fails nothing is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..errors import StoreError
from ..model import (
    Blob,
    CheckpointRecord,
    CheckpointState,
    Commit,
    CommitResult,
    NewRun,
    RunRecord,
    RunStatus,
    WriteRow,
)

if TYPE_CHECKING:  # the service's schedules are read on first use, not when a kernel attaches
    from ..model import EventRecord, PendingInterrupt, PruneReport, StatusRows
    from .figures import Figures
    from .schedules import ScheduleRecord

__all__ = ["HISTORY_COLUMNS", "Conflict", "Store"]

# The columns of a history row; the last one is the bytes of values the checkpoint wrote.
HISTORY_COLUMNS = (
    "seq, checkpoint_id, node_id, step, status, created_at, duration, attempts, error, error_type, "
    "node_output, iteration, item_index, branch_key, parent_checkpoint_id, agent_path"
)


class Conflict(StoreError):
    """A commit's expectation about the run (status, owner) no longer holds."""

    def __init__(self, run: RunRecord, message: str) -> None:
        super().__init__(message)
        self.run = run


@runtime_checkable
class Store(Protocol):
    """Persistence of runs, checkpoints, interrupts, idempotent results, blobs and events."""

    url: str
    durability: str

    async def create_run(self, new: NewRun) -> tuple[RunRecord, bool]:
        """Create a run (with its first checkpoints and events) or return the one with its key."""
        ...

    async def get_run(self, run_id: str) -> RunRecord:
        """Return a run; raise RunNotFound."""
        ...

    async def list_runs(self, name: str | None = None, statuses: Iterable[RunStatus] | None = None) -> list[RunRecord]:
        """Return runs, newest first, optionally of one name and of some statuses."""
        ...

    async def commit(self, commit: Commit) -> CommitResult:
        """Write a commit atomically; raise Conflict or AlreadyResumed without writing."""
        ...

    async def resume_point(self, run_id: str) -> CheckpointRecord | None:
        """Return the latest checkpoint that is not a ``run_end`` tombstone."""
        ...

    async def head_checkpoint(self, run_id: str) -> CheckpointRecord | None:
        """Return the run's latest checkpoint, tombstones included."""
        ...

    async def node_checkpoint(
        self,
        run_id: str,
        node_id: str,
        prefix: str = "after:",
        max_seq: int | None = None,
        agent_path: str | None = None,
    ) -> CheckpointRecord | None:
        """Return a node's latest checkpoint whose step starts with ``prefix`` (an indexed lookup),
        at or before ``max_seq``, and of the agent ``agent_path`` or its tools when given."""
        ...

    async def unfinished_steps(self, run_id: str, node_id: str, agent_path: str) -> list[CheckpointRecord]:
        """Return the checkpoints of the agent ``agent_path`` (exactly) in a node since the node last
        finished (its latest ``after:`` checkpoint), in seq order: an indexed lookup of those rows alone."""
        ...

    async def get_checkpoint(self, run_id: str, checkpoint_id: str) -> CheckpointRecord:
        """Return one checkpoint of a run; raise CheckpointNotFound."""
        ...

    async def state_at(self, run_id: str, seq: int | None = None) -> CheckpointState:
        """Return a run's state at checkpoint ``seq`` (None: its latest), rebuilt from stored changes.

        It costs about as many rows as the state has entries, whatever the length of the run; a
        fork's state starts from its parent's at the fork point.
        """
        ...

    async def states_at(self, run_id: str, seqs: Iterable[int]) -> dict[int, CheckpointState]:
        """Return a run's states at many checkpoints (by seq), reading each row once."""
        ...

    async def latest_states(self, run_ids: list[str]) -> dict[str, CheckpointState]:
        """Return the latest state of each run, in one call."""
        ...

    async def status_rows(self, run_id: str) -> StatusRows:
        """Return what a run's status is made of: each checkpoint's step and address, the queue at
        its resume point, its latest skipped and its completed nodes (one call)."""
        ...

    async def list_checkpoints(self, run_id: str) -> list[CheckpointRecord]:
        """Return a run's checkpoints in seq order."""
        ...

    async def pending_interrupts(self, run_id: str) -> list[PendingInterrupt]:
        """Return the gates of a run that wait for a decision."""
        ...

    async def expired_interrupts(self, now: float, run_id: str | None = None) -> list[PendingInterrupt]:
        """Return pending interrupts whose timeout has passed, of one run or of all."""
        ...

    async def get_blobs(self, hashes: Iterable[str], key: bytes | None = None) -> dict[str, Blob]:
        """Return the blobs stored under the given addresses (missing ones are left out).

        With the secret ``key``, a store may hash a blob's bytes as it reads them and hand the
        digest on in ``Blob.read_digest``, sparing the loader a second pass.
        """
        ...

    async def get_idempotent(self, run_id: str, key: str) -> str | None:
        """Return the blob address of a stored @idempotent result, if any."""
        ...

    async def list_events(self, run_id: str, after_seq: int = 0) -> list[EventRecord]:
        """Return a run's events with seq above ``after_seq``, in order."""
        ...

    async def history_rows(self, run_id: str) -> list[tuple[Any, ...]]:
        """Return a run's checkpoints as rows in HISTORY_COLUMNS order, with bytes written (one query)."""
        ...

    async def fork_tree(self, run_id: str) -> list[tuple[RunRecord, dict[str, Any]]]:
        """Return every run of the fork tree holding ``run_id`` (from its root), with fork details."""
        ...

    async def prune(self, older_than: float) -> PruneReport:
        """Delete finished history last touched before the epoch time ``older_than``."""
        ...

    async def keyed_results(self, run_id: str, prefix: str) -> list[tuple[str, str]]:
        """Return (key, value address) of a run's keyed results whose key starts with ``prefix``."""
        ...

    async def keyed_results_of(self, run_id: str, prefixes: Sequence[str]) -> list[tuple[str, str]]:
        """Return (key, value address) of a run's keyed results whose key starts with one of
        ``prefixes``: one read, whatever their number."""
        ...

    async def pending_writes_of(self, run_id: str, checkpoint_ids: Sequence[str]) -> list[WriteRow]:
        """Return a run's pending writes stored under any of ``checkpoint_ids``: one read, whatever their number."""
        ...

    async def copy_pending_writes(self, source_run_id: str, target_run_id: str) -> None:
        """Copy every pending write of a run to another run; the target's own writes stay."""
        ...

    async def checkpoint_index(self, run_id: str) -> list[tuple[int, str]]:
        """Return (seq, checkpoint id) of a run's checkpoints in seq order: one read of those two columns."""
        ...

    async def checkpoint_extras(
        self, run_id: str, seqs: Iterable[int]
    ) -> dict[int, tuple[dict[str, Any], dict[str, str]]]:
        """Return the ``extra`` and the state's manifest (name to address) of a run's checkpoints by
        seq: one state rebuilt, then each row between the first and the last read once, decoding
        only what those need."""
        ...

    async def runs_by_id_prefix(self, prefix: str, limit: int) -> list[RunRecord]:
        """Return up to ``limit`` runs whose id starts with ``prefix``, in id order (ids are text)."""
        ...

    async def checkpoints_by_extra(self, path: Sequence[str], values: Sequence[str]) -> list[CheckpointRecord]:
        """Return the checkpoints, in any run, whose ``extra`` holds one of ``values`` at ``path``."""
        ...

    async def delete_runs(self, run_ids: Sequence[str]) -> None:
        """Delete runs with all they hold, in one transaction (values go at the next collection)."""
        ...

    async def forget_checkpoints(self, doomed: Mapping[str, Sequence[tuple[int, str]]]) -> list[str]:
        """Delete checkpoints (run -> [(seq, id their pending writes are stored under, or "")]) and those
        writes, keeping the rest rebuildable; delete and return the runs left empty."""
        ...

    async def figures(self, since: float) -> Figures:
        """Return runs by status, the open gates, and the node durations of checkpoints written after
        the epoch time ``since``: a few aggregate, indexed queries, whatever the store's size."""
        ...

    async def put_schedule(self, schedule: ScheduleRecord) -> tuple[ScheduleRecord, bool]:
        """Add a schedule, or keep the one with its id (its ``missed`` policy and source updated, its next
        and last runs kept); return it and whether it is new."""
        ...

    async def get_schedule(self, schedule_id: str) -> ScheduleRecord | None:
        """Return one schedule, or None."""
        ...

    async def list_schedules(self) -> list[ScheduleRecord]:
        """Return every schedule, the soonest due first."""
        ...

    async def delete_schedule(self, schedule_id: str) -> bool:
        """Delete a schedule; return whether there was one."""
        ...

    async def advance_schedule(
        self, schedule_id: str, seen_next: float, next_run: float, ran_at: float | None, run_id: str | None
    ) -> bool:
        """Move a schedule on to ``next_run`` only if its next run is still ``seen_next`` (one writer wins),
        recording the due time ``ran_at`` and its run when one ran; return whether it moved."""
        ...

    async def ping(self) -> None:
        """Read the store once; raise a StoreError when it cannot answer."""
        ...

    async def close(self) -> None:
        """Release connections; the store cannot be used afterwards."""
        ...
