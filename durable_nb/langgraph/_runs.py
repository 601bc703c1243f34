"""Threads as runs: which durable_nb run holds each thread's namespace, and what a saver
remembers of each run's head so that it writes the next checkpoint without reading it back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._ids import new_id
from ..errors import CheckpointNotFound
from ..model import CheckpointRecord, NewRun, RunKind, RunRecord, RunStatus, RunUpdate
from ..store.protocol import Store
from ._shape import KEY_PREFIX, META, Head, is_lg, lg, our_id

__all__ = ["ThreadRuns"]


class ThreadRuns:
    """The runs holding a store's LangGraph threads (one per thread and namespace), found once and
    remembered, with the head of each run this saver wrote to and where it saw each thread stop."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._runs: dict[tuple[str, str], str] = {}
        self._heads: dict[str, Head] = {}
        # Per run, the checkpoint at which this saver saw the thread stop (an interrupt, a failed task).
        self._stops: dict[str, str] = {}
        # Per run, its row as this saver's last commit left it: a commit that passes it as seen
        # is one conditional UPDATE instead of a read and an update (a stale one is read again).
        self._rows: dict[str, RunRecord] = {}

    async def of_thread(self, thread_id: str) -> list[RunRecord]:
        """Return the runs of a thread, one per namespace."""
        found = []
        for run in await self.store.list_runs(thread_id):
            info = run.meta.get(META)
            if isinstance(info, dict) and info.get("thread_id") == thread_id:
                found.append(run)
        return found

    def known(self, thread_id: str, ns: str) -> str | None:
        """Return the id of the run of a thread's namespace if remembered (no store call)."""
        return self._runs.get((thread_id, ns))

    async def find(self, thread_id: str, ns: str, fresh: bool = False) -> str | None:
        """Return the id of the run of a thread's namespace (as remembered unless ``fresh``), or None."""
        if not fresh and (thread_id, ns) in self._runs:
            return self._runs[thread_id, ns]
        for run in await self.of_thread(thread_id):
            if run.meta[META].get("checkpoint_ns") == ns:
                self._runs[thread_id, ns] = run.run_id
                return run.run_id
        self._runs.pop((thread_id, ns), None)
        return None

    async def open(self, thread_id: str, ns: str) -> str:
        """Return the run of a thread's namespace, created on first use (once, whoever races)."""
        found = await self.find(thread_id, ns)
        if found is not None:
            return found
        run, _ = await self.store.create_run(
            NewRun(
                run_id=new_id(),
                name=thread_id,
                # A workflow run as far as views go; its meta says it holds a LangGraph thread.
                kind=RunKind.WORKFLOW,
                # Never running or pending: recovery would fail a run no live process owns.
                status=RunStatus.COMPLETED,
                input_manifest={},
                idempotency_key=KEY_PREFIX + ns,
                meta={META: {"thread_id": thread_id, "checkpoint_ns": ns}},
            )
        )
        self._runs[thread_id, ns] = run.run_id
        self._rows[run.run_id] = run
        return run.run_id

    def forget(self, run_ids: Sequence[str]) -> None:
        """Forget what is remembered of runs deleted or cut short (by this saver or another)."""
        for run_id in run_ids:
            self._heads.pop(run_id, None)
            self._stops.pop(run_id, None)
            self._rows.pop(run_id, None)
        gone = set(run_ids)
        for key in [k for k, v in self._runs.items() if v in gone]:
            del self._runs[key]

    async def head(self, run_id: str) -> Head:
        """Return the run's head as remembered, read from the store the first time."""
        head = self._heads.get(run_id)
        if head is None:
            run = await self.store.get_run(run_id)
            self._rows[run_id] = run
            record, _ = await self.latest(run_id)
            if record is None:
                head = Head(run.head_seq, None, {}, {}, 0, run.status, {}, None)
            else:
                state = await self.store.state_at(run_id, run.head_seq)
                info = lg(record)
                head = Head(
                    run.head_seq,
                    info["id"],
                    info["versions"],
                    state.manifest,
                    state.since_snapshot,
                    run.status,
                    info["seen"],
                    info["ts"],
                )
            self._heads[run_id] = head
        return head

    def moved(self, run_id: str, head: Head | None) -> None:
        """Remember the run's new head (None: read it again, another writer moved it on)."""
        if head is None:
            self._heads.pop(run_id, None)
            self._rows.pop(run_id, None)
        else:
            self._heads[run_id] = head

    def row(self, run_id: str) -> RunRecord | None:
        """Return the run's row as this saver's last commit (or read) left it, if remembered."""
        return self._rows.get(run_id)

    def committed(self, run: RunRecord) -> None:
        """Remember the run's row as a commit left it (not an older one: LangGraph stores a step's
        writes and its checkpoint from two threads, which may report back in either order)."""
        known = self._rows.get(run.run_id)
        if known is None or known.head_seq <= run.head_seq:
            self._rows[run.run_id] = run

    def advanced(self, run: RunRecord, head: Head) -> None:
        """Remember the run's row and head as this saver's commit of its next checkpoint left them."""
        head.seq, head.status = run.head_seq, run.status
        self._heads[run.run_id] = head
        self.committed(run)

    def stopped(self, run_id: str, checkpoint_id: str) -> None:
        """Note that the thread stopped at a checkpoint (an interrupt, a failed task)."""
        self._stops[run_id] = max(checkpoint_id, self._stops.get(run_id, ""))

    def moves(self, run_id: str, head: Head, checkpoint_id: str) -> bool:
        """Tell whether storing a checkpoint changes the thread's status (see status_after)."""
        stop = self._stops.get(run_id)
        if stop is not None:
            return stop < checkpoint_id
        return head.status in (RunStatus.PAUSED, RunStatus.FAILED, RunStatus.PENDING)

    def status_after(self, run_id: str, head: Head, checkpoint_id: str) -> RunUpdate | None:
        """The run's status once a checkpoint is stored: a thread rests at a checkpoint it can go on
        from (completed), unless it stopped at that checkpoint or a later one (paused, failed).

        LangGraph may store a step's writes before the checkpoint they belong to, from another
        thread (its "async" durability): an interrupt can be written before the checkpoint it
        stopped at, so the order of commits cannot tell."""
        stop = self._stops.get(run_id)
        if stop is not None:
            if stop >= checkpoint_id:
                return None
            self._stops.pop(run_id, None)
        elif head.status not in (RunStatus.PAUSED, RunStatus.FAILED, RunStatus.PENDING):
            return None
        return RunUpdate(status=RunStatus.COMPLETED, error=None, error_type=None)

    async def latest(self, run_id: str) -> tuple[CheckpointRecord | None, list[CheckpointRecord]]:
        """Return a run's latest LangGraph checkpoint and the decisions recorded after it, in order.

        durable_nb's front ends decide a thread's gates as any run's: a decision is a checkpoint
        of the run after the one the thread stopped at, which LangGraph knows nothing of.
        """
        record = await self.store.head_checkpoint(run_id)
        decisions = []
        while record is not None and not is_lg(record):
            if record.decision is not None:
                decisions.append(record)
            if record.parent_checkpoint_id is None:
                return None, []
            record = await self.store.get_checkpoint(run_id, record.parent_checkpoint_id)
        return record, decisions[::-1]

    def remembered(self, run_id: str) -> Head | None:
        """Return the run's head if remembered (no store call)."""
        return self._heads.get(run_id)

    def remembered_step(self, thread_id: str, ns: str) -> tuple[str, Head, RunRecord | None] | None:
        """Return the run of a thread's namespace, its head and its row if the head is remembered
        (no store call): what a step's put goes on from, looked up at once."""
        run_id = self._runs.get((thread_id, ns))
        head = None if run_id is None else self._heads.get(run_id)
        if run_id is None or head is None:
            return None
        return run_id, head, self._rows.get(run_id)

    @staticmethod
    def base_at_head(head: Head, parent_id: str | None) -> tuple[Any, ...] | None:
        """Return ``base`` for a new checkpoint that follows the head or none (no store call), else None."""
        if parent_id is None:
            return {}, {}, {}, None
        if parent_id == head.checkpoint_id:
            return head.versions, head.manifest, head.seen, head.ts
        return None

    async def base(self, run_id: str, head: Head, parent_id: str | None) -> tuple[Any, ...]:
        """Return the channel versions, value addresses, seen versions and time of the checkpoint
        a new one follows."""
        known = self.base_at_head(head, parent_id)
        if known is not None:
            return known
        try:
            record = await self.store.get_checkpoint(run_id, our_id(parent_id, run_id))
        except CheckpointNotFound:
            return {}, {}, {}, None
        info = lg(record)
        return info["versions"], (await self.store.state_at(run_id, record.seq)).manifest, info["seen"], info["ts"]
