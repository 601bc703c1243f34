"""The store protocol's methods shared by the SQL backends.

Each method is one call of a function of the backend's own module (``_get_run``,
``_commit``, …), run by the backend's ``_run`` on a connection: SQLite's one connection,
under its lock, or a pooled PostgreSQL one. The SQL differs; the protocol does not.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from .. import _tally as tally
from ..errors import CheckpointNotFound, RunNotFound
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
from .dialect import Dialect
from .rules import check_event_seq, check_run_id

if TYPE_CHECKING:  # the service's schedules are read on first use, not when a kernel attaches
    from ..model import EventRecord, PendingInterrupt, PruneReport, StatusRows
    from .figures import Figures
    from .schedules import ScheduleRecord

__all__ = ["SQLStore"]

T = TypeVar("T")


def _bulk_ops() -> ModuleType:
    """The operations on many rows at once, imported on first use: attaching a kernel needs none."""
    from . import bulk_ops

    return bulk_ops


def _schedules() -> ModuleType:
    """The schedules' statements, imported on first use: a kernel attaching never needs them."""
    from . import schedules

    return schedules


class SQLStore:
    """Base of the SQL stores: subclasses provide ``_run`` and the module functions."""

    url: str
    # False for a store opened only to read (connect(create=False)): its first use refuses a store
    # that does not exist (StoreNotFound) instead of creating it.
    creates: bool = True
    # The backend's module of operations (``_get_run``, ``_commit``, …).
    _sql: ModuleType
    # How the backend spells the SQL that the bulk operations share.
    _dialect: Dialect

    def _run(self, fn: Callable[..., T], *args: Any) -> Awaitable[T]:
        """Return the awaitable of one operation on a connection (where it runs is the driver's choice)."""
        raise NotImplementedError

    def close_now(self) -> None:
        """Close the store's connections on this thread; later calls raise StoreUnavailable."""
        raise NotImplementedError

    async def create_run(self, new: NewRun) -> tuple[RunRecord, bool]:
        """Create a run with its first checkpoints and events, or return the keyed original."""
        return await self._run(self._sql._create_run, new, time.time())

    async def get_run(self, run_id: str) -> RunRecord:
        """Return a run; raise RunNotFound."""
        check_run_id(run_id)
        run = await self._run(self._sql._get_run, run_id)
        if run is None:
            raise RunNotFound(run_id, self.url)
        return run

    async def list_runs(self, name: str | None = None, statuses: Iterable[RunStatus] | None = None) -> list[RunRecord]:
        """Return runs, newest first, optionally of one name and of some statuses."""
        return await self._run(self._sql._list_runs, name, None if statuses is None else [s.value for s in statuses])

    async def commit(self, commit: Commit) -> CommitResult:
        """Write a commit in one transaction; its checks first, nothing written if one fails."""
        if self._has_large(commit.blobs):
            return await self._commit_with_files(commit)
        return await self._commit_rows(commit)

    async def _commit_rows(self, commit: Commit) -> CommitResult:
        """Write a commit's rows in one transaction (its large values are files already)."""
        result = await self._run(self._sql._commit, commit, time.time(), self.url)
        tally.committed(commit)
        return result

    def _has_large(self, blobs: list[Blob]) -> bool:
        """Tell whether a backend keeps some of ``blobs`` outside its rows (SQLite's value files)."""
        return False

    async def _commit_with_files(self, commit: Commit) -> CommitResult:
        raise NotImplementedError

    async def resume_point(self, run_id: str) -> CheckpointRecord | None:
        """Return the latest checkpoint that is not a run_end tombstone."""
        return await self._run(self._sql._one_checkpoint, run_id, "AND step <> 'run_end'")

    async def head_checkpoint(self, run_id: str) -> CheckpointRecord | None:
        """Return the run's latest checkpoint."""
        return await self._run(self._sql._one_checkpoint, run_id, "")

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
        return await self._run(self._sql._node_checkpoint, run_id, node_id, prefix, max_seq, agent_path)

    async def unfinished_steps(self, run_id: str, node_id: str, agent_path: str) -> list[CheckpointRecord]:
        """Return an agent's checkpoints in a node since the node last finished, in seq order (indexed)."""
        return await self._run(_bulk_ops().unfinished_steps, self._dialect, run_id, node_id, agent_path)

    async def get_checkpoint(self, run_id: str, checkpoint_id: str) -> CheckpointRecord:
        """Return one checkpoint of a run; raise CheckpointNotFound."""
        found = await self._run(self._sql._checkpoint_by_id, run_id, checkpoint_id)
        if found is None:
            raise CheckpointNotFound(checkpoint_id, run_id)
        return found

    async def state_at(self, run_id: str, seq: int | None = None) -> CheckpointState:
        """Return a run's state (values and completed nodes) at checkpoint ``seq``, or at its latest."""
        return await self._run(self._sql._state_at, run_id, seq)

    async def states_at(self, run_id: str, seqs: Iterable[int]) -> dict[int, CheckpointState]:
        """Return a run's states at many checkpoints (by seq), reading each row once."""
        return await self._run(self._sql._states_at, run_id, list(seqs))

    async def latest_states(self, run_ids: list[str]) -> dict[str, CheckpointState]:
        """Return the latest state of each run (one call)."""
        return await self._run(self._sql._latest_states, list(run_ids)) if run_ids else {}

    async def status_rows(self, run_id: str) -> StatusRows:
        """Return what a run's status is made of (one call, a few columns per checkpoint)."""
        return await self._run(self._sql._status_rows, run_id)

    async def list_checkpoints(self, run_id: str) -> list[CheckpointRecord]:
        """Return a run's checkpoints in seq order."""
        return await self._run(self._sql._list_checkpoints, run_id)

    async def pending_interrupts(self, run_id: str) -> list[PendingInterrupt]:
        """Return the gates of a run that wait for a decision."""
        return await self._run(self._sql._pending, run_id)

    async def expired_interrupts(self, now: float, run_id: str | None = None) -> list[PendingInterrupt]:
        """Return pending interrupts whose timeout has passed."""
        return await self._run(self._sql._expired, now, run_id)

    async def get_blobs(self, hashes: Iterable[str], key: bytes | None = None) -> dict[str, Blob]:
        """Return the blobs stored under the given addresses (missing ones left out)."""
        wanted = list(dict.fromkeys(hashes))
        return await self._run(self._sql._get_blobs, wanted, key) if wanted else {}

    async def get_idempotent(self, run_id: str, key: str) -> str | None:
        """Return the address of a stored @idempotent result."""
        return await self._run(self._sql._get_idempotent, run_id, key)

    async def list_events(self, run_id: str, after_seq: int = 0) -> list[EventRecord]:
        """Return a run's events after ``after_seq`` in order."""
        check_event_seq(after_seq)
        return await self._run(self._sql._list_events, run_id, after_seq)

    async def history_rows(self, run_id: str) -> list[tuple[Any, ...]]:
        """Return a run's checkpoints as history rows with the bytes each wrote (one query)."""
        return await self._run(self._sql._history_rows, run_id)

    async def fork_tree(self, run_id: str) -> list[tuple[RunRecord, dict[str, Any]]]:
        """Return the whole fork tree holding ``run_id``, from its root, with fork details."""
        return await self._run(self._sql._fork_tree, run_id)

    async def prune(self, older_than: float) -> PruneReport:
        """Delete finished history older than the epoch time ``older_than``; collect blobs."""
        return await self._run(self._sql._prune, older_than)

    async def keyed_results(self, run_id: str, prefix: str) -> list[tuple[str, str]]:
        """Return (key, value address) of a run's keyed results whose key starts with ``prefix``."""
        return await self._run(_bulk_ops().keyed_results, self._dialect, run_id, prefix)

    async def keyed_results_of(self, run_id: str, prefixes: Sequence[str]) -> list[tuple[str, str]]:
        """Return (key, value address) of a run's keyed results whose key starts with one of ``prefixes``."""
        return await self._run(_bulk_ops().keyed_results_of, self._dialect, run_id, list(prefixes))

    async def pending_writes_of(self, run_id: str, checkpoint_ids: Sequence[str]) -> list[WriteRow]:
        """Return a run's pending writes stored under any of ``checkpoint_ids`` (one read)."""
        return await self._run(_bulk_ops().pending_writes_of, self._dialect, run_id, list(checkpoint_ids))

    async def copy_pending_writes(self, source_run_id: str, target_run_id: str) -> None:
        """Copy every pending write of a run to another run (one statement)."""
        await self._run(_bulk_ops().copy_pending_writes, self._dialect, source_run_id, target_run_id)

    async def checkpoint_index(self, run_id: str) -> list[tuple[int, str]]:
        """Return (seq, checkpoint id) of a run's checkpoints in seq order (one narrow read)."""
        return await self._run(_bulk_ops().checkpoint_index, self._dialect, run_id)

    async def checkpoint_extras(
        self, run_id: str, seqs: Iterable[int]
    ) -> dict[int, tuple[dict[str, Any], dict[str, str]]]:
        """Return the ``extra`` and state manifest of a run's checkpoints by seq, reading each row once."""
        return await self._run(_bulk_ops().checkpoint_extras, self._dialect, self._sql._state_at, run_id, list(seqs))

    async def runs_by_id_prefix(self, prefix: str, limit: int) -> list[RunRecord]:
        """Return up to ``limit`` runs whose id starts with ``prefix``, in id order."""
        return await self._run(_bulk_ops().runs_by_id_prefix, self._dialect, prefix, limit)

    async def ping(self) -> None:
        """Read the store once; raise a StoreError when it cannot answer."""
        await self._run(_bulk_ops().ping)

    async def checkpoints_by_extra(self, path: Sequence[str], values: Sequence[str]) -> list[CheckpointRecord]:
        """Return the checkpoints, in any run, whose ``extra`` holds one of ``values`` at ``path``."""
        return await self._run(_bulk_ops().checkpoints_by_extra, self._dialect, list(path), list(values))

    async def delete_runs(self, run_ids: Sequence[str]) -> None:
        """Delete runs with all they hold, in one transaction (values go at the next collection)."""
        await self._run(_bulk_ops().delete_runs, self._dialect, list(run_ids))

    async def forget_checkpoints(self, doomed: Mapping[str, Sequence[tuple[int, str]]]) -> list[str]:
        """Delete checkpoints (run -> [(seq, id their pending writes are stored under, or "")]) and those
        writes, keeping the rest rebuildable; delete and return the runs left empty."""
        return await self._run(_bulk_ops().forget_checkpoints, self._dialect, self._sql._state_at, doomed)

    async def figures(self, since: float) -> Figures:
        """Return runs by status, the open gates, and node durations written after ``since`` (bounded cost)."""
        from .figures import read_figures  # a server's scrape, never a kernel's

        return await self._run(read_figures, self._dialect, since)

    async def put_schedule(self, schedule: ScheduleRecord) -> tuple[ScheduleRecord, bool]:
        """Add a schedule, or keep the one with its id (policy updated, next and last runs kept); say if new."""
        return await self._run(_schedules().put_schedule, self._dialect, schedule, time.time())

    async def get_schedule(self, schedule_id: str) -> ScheduleRecord | None:
        """Return one schedule, or None."""
        return await self._run(_schedules().get_schedule, self._dialect, schedule_id)

    async def list_schedules(self) -> list[ScheduleRecord]:
        """Return every schedule, the soonest due first."""
        return await self._run(_schedules().list_schedules, self._dialect)

    async def delete_schedule(self, schedule_id: str) -> bool:
        """Delete a schedule; return whether there was one."""
        return await self._run(_schedules().delete_schedule, self._dialect, schedule_id)

    async def advance_schedule(
        self, schedule_id: str, seen_next: float, next_run: float, ran_at: float | None, run_id: str | None
    ) -> bool:
        """Move a schedule on to ``next_run`` only if its next run is still ``seen_next``; say if it moved."""
        return await self._run(
            _schedules().advance_schedule, self._dialect, schedule_id, seen_next, next_run, ran_at, run_id, time.time()
        )
