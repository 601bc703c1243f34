"""Thread administration: delete, copy and prune threads, and delete what LangGraph runs made.

Values are shared by content address across threads and runs: after a deletion, only the values
nothing refers to any more are collected.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..errors import InvalidInput
from ..model import CheckpointDraft, CheckpointState, Commit
from ..store.protocol import Store
from ._runs import ThreadRuns
from ._shape import META, address, is_lg, lg, our_id

__all__ = ["ThreadAdmin"]

_STRATEGIES = ("keep_latest", "delete")


class ThreadAdmin:
    """Delete, copy and prune the threads of a store, keeping a saver's memory of them true."""

    def __init__(self, store: Store, runs: ThreadRuns) -> None:
        self.store = store
        self._runs = runs

    async def delete_thread(self, thread_id: str) -> None:
        """Delete a thread: every namespace's checkpoints and writes, and values nothing else uses."""
        thread_id, _ = address({"configurable": {"thread_id": thread_id}})
        runs = [run.run_id for run in await self._runs.of_thread(thread_id)]
        if runs:
            await self.store.delete_runs(runs)
            self._runs.forget(runs)
            await self._collect()

    async def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete every checkpoint (and its writes) made by the given LangGraph runs, in any thread."""
        ids = _texts(run_ids, "run_ids", "LangGraph run ids (metadata['run_id'])")
        found = await self.store.checkpoints_by_extra(("langgraph", "metadata", "run_id"), ids)
        doomed: dict[str, list[tuple[int, str]]] = {}
        for record in found:
            doomed.setdefault(record.run_id, []).append((record.seq, lg(record)["id"]))
        await self.store.forget_checkpoints(doomed)
        touched = list(doomed)
        if touched:
            self._runs.forget(touched)
            await self._collect()

    async def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread's checkpoints and writes to another thread; the values are shared, not copied."""
        source, _ = address({"configurable": {"thread_id": source_thread_id}})
        target, _ = address({"configurable": {"thread_id": target_thread_id}})
        if source == target:
            raise InvalidInput(f"copy_thread() copies a thread to another one; both are {source!r}.")
        for run in await self._runs.of_thread(source):
            records = await self.store.list_checkpoints(run.run_id)
            if not records:
                continue
            # Decisions recorded at the thread's gates stay with it: the copy starts unclaimed.
            records = [record for record in records if is_lg(record)]
            ns = run.meta[META]["checkpoint_ns"]
            copy_id = await self._runs.open(target, ns)
            first = await self.store.state_at(run.run_id, records[0].seq)
            drafts = []
            for i, record in enumerate(records):
                fields = {f.name: getattr(record, f.name) for f in dataclasses.fields(CheckpointDraft)}
                parent = lg(record).get("parent")
                fields["checkpoint_id"] = our_id(lg(record)["id"], copy_id)
                fields["parent_checkpoint_id"] = our_id(parent, copy_id) if parent else None
                if i == 0:
                    # The copy's first checkpoint cannot build on the source's earlier rows.
                    fields["snapshot"] = CheckpointState(dict(first.manifest), [])
                drafts.append(CheckpointDraft(**fields))
            # The writes first: a copy whose checkpoints are stored holds their writes too.
            await self.store.copy_pending_writes(run.run_id, copy_id)
            await self.store.commit(Commit(copy_id, checkpoints=drafts))
            self._runs.moved(copy_id, None)

    async def prune(self, thread_ids: Sequence[str], strategy: str) -> None:
        """Prune threads: ``"keep_latest"`` keeps each namespace's latest checkpoint, ``"delete"`` deletes all."""
        if strategy not in _STRATEGIES:
            raise InvalidInput(f"prune() strategy is 'keep_latest' or 'delete', not {strategy!r}.")
        threads = _texts(thread_ids, "thread_ids", "thread ids")
        runs = [run for thread_id in threads for run in await self._runs.of_thread(thread_id)]
        if not runs:
            return
        run_ids = [run.run_id for run in runs]
        if strategy == "delete":
            await self.store.delete_runs(run_ids)
        else:
            doomed = {}
            for run_id in run_ids:
                records = await self.store.list_checkpoints(run_id)
                # The latest LangGraph checkpoint stays, with the decisions recorded after it.
                latest = max((i for i, r in enumerate(records) if is_lg(r)), default=0)
                if latest > 0:
                    doomed[run_id] = [(r.seq, lg(r)["id"] if is_lg(r) else "") for r in records[:latest]]
            if not doomed:
                return
            await self.store.forget_checkpoints(doomed)
        self._runs.forget(run_ids)
        await self._collect()

    async def _collect(self) -> None:
        # Values are shared by content address across threads and runs: only those nothing refers
        # to any more may go. The store's prune with a cutoff before any run's time deletes no
        # history and collects exactly those.
        await self.store.prune(0.0)


def _texts(items: Sequence[str], name: str, what: str) -> list[str]:
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence | set | frozenset):
        raise InvalidInput(f"{name} is a list of {what}, not {items!r}; pass [{items!r}] for one.")
    bad = [item for item in items if not isinstance(item, str) or not item]
    if bad:
        raise InvalidInput(f"{name} holds {what} as text; {bad[0]!r} is not one.")
    return list(items)
