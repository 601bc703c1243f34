"""DurableSaver: a LangGraph checkpointer whose checkpoints are durable_nb checkpoints.

The saver reads and writes checkpoints; it holds the helpers that do the rest: ``ThreadRuns``
(which run holds a thread, and its head), ``ChannelValues`` (values as stored),
``PendingWrites`` (writes, interrupts and resumes as gates) and ``ThreadAdmin`` (deleting,
copying and pruning threads). Each sync method is the blocking twin of its async one.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Coroutine, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from .._loop import blocking, run_inline, run_sync
from ..errors import CheckpointNotFound
from ..store import connect, resolve_store
from ..store.protocol import Store
from ..store.secret import load_secret
from ..views.threads import register_thread_store, register_value_decoder, thread_run
from ._admin import ThreadAdmin
from ._checkpoints import CheckpointWriter
from ._listing import Listing, Plan
from ._runs import ThreadRuns
from ._shape import META, address, checkpoint_id_of, is_lg, our_id
from ._values import ChannelValues
from ._writes import PendingWrites, begin_invocation

__all__ = ["DurableSaver"]


class DurableSaver(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer over a durable_nb store (SQLite or PostgreSQL).

    Each thread (and subgraph namespace) is a durable_nb run named after the thread; each
    LangGraph checkpoint is one of its checkpoints, so ``durable_nb.history(config)`` shows it.
    Channel values are serialized by ``self.serde`` and stored by content address, signed: a
    value that did not change is not serialized or written again, and a value changed in or
    added to the store is refused (TamperedValueError), never deserialized. Pending writes are
    stored with the thread's run under their checkpoint, signed the same way.
    """

    def __init__(
        self,
        store: Store | str | os.PathLike[str] | None = None,
        *,
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        self.store = resolve_store(store)
        # Helpers hold no serializer: LangGraph's with_allowlist() clones the saver with another
        # one (a shallow copy, sharing them), so each call passes self.serde.
        self._runs = ThreadRuns(self.store)
        self._values = ChannelValues(self.store, load_secret())
        self._writes = PendingWrites(self.store, self._runs, self._values)
        self._admin = ThreadAdmin(self.store, self._runs)
        self._checkpoints = CheckpointWriter(self.store, self._runs, self._values)
        self._listing = Listing(self.store, self._runs, self._values)
        register_value_decoder(META, self._view_value)
        # A LangGraph config names a thread, not this store: durable_nb.history(config) looks here.
        register_thread_store(self.store)

    def _view_value(self, value: Any) -> Any:
        # Channel values are stored as LangGraph's serializer made them: (type, bytes).
        if isinstance(value, tuple | list) and len(value) == 2 and isinstance(value[0], str):
            try:
                return self.serde.loads_typed((value[0], value[1]))
            except Exception:  # noqa: BLE001 - a view shows what it cannot decode as stored
                return value
        return value

    @classmethod
    def from_url(
        cls, url: str | os.PathLike[str], *, durability: str = "full", serde: SerializerProtocol | None = None
    ) -> DurableSaver:
        """Return a saver over the store at ``url`` (``sqlite:///runs.db``, ``postgresql://…``)."""
        return cls(connect(url, durability=durability), serde=serde)

    def __repr__(self) -> str:
        return f"DurableSaver({self.store!r})"

    async def arun_id(self, thread_id: str, checkpoint_ns: str = "") -> str:
        """Return the id of the durable_nb run holding a thread: what history(), forks() and inspect() take."""
        thread_id, ns = address({"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}})
        return (await thread_run(self.store, thread_id, ns)).run_id

    # -- reading checkpoints --------------------------------------------------------------------

    def aget_tuple(self, config: RunnableConfig) -> Coroutine[Any, Any, CheckpointTuple | None]:
        """Return a checkpoint of a thread (its latest unless the config names one), or None."""
        # Not a coroutine function: the invocation starts in the caller's own context (the sync
        # twin's too, not the copy its coroutine runs in), which LangGraph's later writes share.
        begin_invocation()
        return self._get_tuple(config)

    async def _get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id, ns = address(config)
        checkpoint_id = checkpoint_id_of(config)
        for fresh in (False, True):
            run_id = await self._runs.find(thread_id, ns, fresh)
            if run_id is None:
                return None
            latest, decisions = await self._runs.latest(run_id)
            if checkpoint_id is None:
                record = latest
            else:
                try:
                    record = await self.store.get_checkpoint(run_id, our_id(checkpoint_id, run_id))
                except CheckpointNotFound:
                    record = None
            if record is not None and is_lg(record):
                found = {record.checkpoint_id: decisions} if latest is not None and record.seq == latest.seq else {}
                stored = await self._values.stored(record)
                return (await self._values.tuples(self.serde, thread_id, ns, run_id, [stored], found))[0]
        return None

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Yield checkpoints newest first: of a thread (of one namespace when the config names
        one), or of every thread for None; matching ``filter`` (metadata), before ``before``."""
        plan = await self._listing.plan(config, filter, before, limit)
        yielded, start = 0, 0
        while start is not None:
            page, start = await self._listing.page(self.serde, plan, start)
            for item in page:
                if limit is not None and yielded >= limit:
                    return
                yielded += 1
                yield item

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Return checkpoints newest first, as ``alist`` yields them, read a page at a time."""
        # alist is an async generator, which has no blocking twin: the plan is made (and the
        # arguments checked) now, each page read as the caller gets to it.
        return self._pages(run_sync(self._listing.plan(config, filter, before, limit)))

    def _pages(self, plan: Plan) -> Iterator[CheckpointTuple]:
        yielded, start = 0, 0
        while start is not None:
            page, start = run_sync(self._listing.page(self.serde, plan, start))
            for item in page:
                if plan.limit is not None and yielded >= plan.limit:
                    return
                yielded += 1
                yield item

    # -- writing checkpoints --------------------------------------------------------------------

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint as the next checkpoint of its thread's run; return its config."""
        return await self._checkpoints.put(self.serde, config, checkpoint, metadata, new_versions)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint as the next checkpoint of its thread's run; return its config."""
        # A step of a thread this saver wrote to: one blocking store call, else aput, stepped here.
        stored = self._checkpoints.put_now(self.serde, config, checkpoint, metadata, new_versions)
        return stored if stored is not None else run_inline(self.aput(config, checkpoint, metadata, new_versions))

    def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> Coroutine[Any, Any, None]:
        """Store a task's writes under the checkpoint the config names (a write stored before is kept).

        A resume (``Command(resume=…)``) claims the interrupt it answers in the same transaction:
        of concurrent resumers exactly one is stored; the others get AlreadyResumed.
        """
        return self._writes.put(self.serde, config, writes, task_id, task_path)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes under the checkpoint the config names (a write stored before is kept)."""
        # A task's plain writes: one blocking store call, else aput_writes, stepped here.
        if not self._writes.put_now(self.serde, config, writes, task_id, task_path):
            run_inline(self.aput_writes(config, writes, task_id, task_path))

    # -- threads --------------------------------------------------------------------------------

    async def adelete_thread(self, thread_id: str) -> None:
        """Delete a thread: every namespace's checkpoints and writes, and values nothing else uses."""
        await self._admin.delete_thread(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete every checkpoint (and its writes) made by the given LangGraph runs, in any thread."""
        await self._admin.delete_for_runs(run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread's checkpoints and writes to another thread; the values are shared, not copied."""
        await self._admin.copy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prune threads: ``"keep_latest"`` keeps each namespace's latest checkpoint, ``"delete"`` deletes all."""
        await self._admin.prune(thread_ids, strategy)

    # -- blocking twins: LangGraph's sync graphs call these from any thread, a loop's included -----

    run_id = blocking(arun_id)
    # A step's calls make store calls only: stepped in the calling thread, no loop turned for them.
    get_tuple = blocking(aget_tuple, inline=True)
    delete_thread = blocking(adelete_thread)
    delete_for_runs = blocking(adelete_for_runs)
    copy_thread = blocking(acopy_thread)
    prune = blocking(aprune)
