"""DurableSaver: a LangGraph checkpointer whose checkpoints are durable_nb checkpoints."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import os
import time
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping, Sequence
from contextvars import ContextVar
from datetime import datetime
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT, RESUME

from .._ids import new_id
from .._loop import run_sync
from ..engine.values import ValueCodec
from ..errors import AlreadyResumed, CheckpointNotFound, InvalidInput, RunNotFound, SerializationError, StoreError
from ..model import (
    Blob,
    CheckpointDraft,
    CheckpointRecord,
    CheckpointState,
    CheckpointStatus,
    Commit,
    EventType,
    NewEvent,
    NewRun,
    PendingInterrupt,
    RunKind,
    RunRecord,
    RunStatus,
    RunUpdate,
    step_name,
)
from ..store import codec, connect, resolve_store
from ..store.protocol import Conflict, Store
from ..store.rules import ANY_NODE
from ..store.secret import load_secret
from ..store.state import snapshot_due
from ..views.threads import register_thread_store, register_value_decoder, thread_run
from ._gates import gate_node, gate_of, with_decisions
from ._shape import (
    KEY_PREFIX,
    META,
    WRITE_KEYS,
    Head,
    address,
    checkpoint_id_of,
    checkpoint_of_write,
    is_lg,
    lg,
    metadata_json,
    node_of,
    our_id,
    pick_writes,
    tuple_of,
    write_prefix,
)

__all__ = ["DurableSaver"]

# A commit refused because the thread moved on meanwhile (another process wrote to it) is
# computed again from what is stored now, a bounded number of times.
_ATTEMPTS = 8
_STRATEGIES = ("keep_latest", "delete")

# LangGraph's task id for writes of the graph's input, such as Command(resume=…).
_INPUT_TASK = "00000000-0000-0000-0000-000000000000"


@dataclasses.dataclass
class _Invocation:
    """What a saver learns during one graph invocation: the interrupts whose resume it lost.

    LangGraph stores writes from background threads (or tasks), each in a copy of the context
    of the invocation that loaded the thread with get_tuple(): they share this object.
    """

    # Keyed by (thread id, namespace, checkpoint id): the resumes in flight, and those lost.
    claims: dict[tuple[str, str, str], concurrent.futures.Future[None]] = dataclasses.field(default_factory=dict)
    lost: dict[tuple[str, str, str], AlreadyResumed] = dataclasses.field(default_factory=dict)


_invocation: ContextVar[_Invocation | None] = ContextVar("durable_nb_langgraph_invocation", default=None)


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
        self._secret = load_secret()
        self._runs: dict[tuple[str, str], str] = {}
        self._heads: dict[str, Head] = {}
        # Per run, the checkpoint at which this saver saw the thread stop (an interrupt, a failed task).
        self._stops: dict[str, str] = {}
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

    def run_id(self, thread_id: str, checkpoint_ns: str = "") -> str:
        """Return the id of the durable_nb run holding a thread: what history(), forks() and inspect() take."""
        return run_sync(self.arun_id(thread_id, checkpoint_ns))

    # -- runs of threads ------------------------------------------------------------------------

    async def _thread_runs(self, thread_id: str) -> list[RunRecord]:
        """Return the runs of a thread, one per namespace."""
        found = []
        for run in await self.store.list_runs(thread_id):
            info = run.meta.get(META)
            if isinstance(info, dict) and info.get("thread_id") == thread_id:
                found.append(run)
        return found

    async def _find_run(self, thread_id: str, ns: str, fresh: bool = False) -> str | None:
        if not fresh and (thread_id, ns) in self._runs:
            return self._runs[thread_id, ns]
        for run in await self._thread_runs(thread_id):
            if run.meta[META].get("checkpoint_ns") == ns:
                self._runs[thread_id, ns] = run.run_id
                return run.run_id
        self._runs.pop((thread_id, ns), None)
        return None

    async def _open_run(self, thread_id: str, ns: str) -> str:
        """Return the run of a thread's namespace, created on first use (once, whoever races)."""
        found = await self._find_run(thread_id, ns)
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
        return run.run_id

    def _forget(self, run_ids: Sequence[str] = ()) -> None:
        for run_id in run_ids:
            self._heads.pop(run_id, None)
            self._stops.pop(run_id, None)
        gone = set(run_ids)
        for key in [k for k, v in self._runs.items() if v in gone]:
            del self._runs[key]

    async def _head(self, run_id: str) -> Head:
        head = self._heads.get(run_id)
        if head is None:
            run = await self.store.get_run(run_id)
            record, _ = await self._latest(run_id)
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

    def _status_after(self, run_id: str, head: Head, checkpoint_id: str) -> RunUpdate | None:
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

    async def _base(self, run_id: str, head: Head, parent_id: str | None) -> tuple[Any, ...]:
        """Return the channel versions, value addresses, seen versions and time of the checkpoint
        a new one follows."""
        if parent_id is None:
            return {}, {}, {}, None
        if parent_id == head.checkpoint_id:
            return head.versions, head.manifest, head.seen, head.ts
        try:
            record = await self.store.get_checkpoint(run_id, our_id(parent_id, run_id))
        except CheckpointNotFound:
            return {}, {}, {}, None
        info = lg(record)
        return info["versions"], (await self.store.state_at(run_id, record.seq)).manifest, info["seen"], info["ts"]

    # -- values ---------------------------------------------------------------------------------

    def _dumps(self, name: str, value: Any) -> tuple[str, bytes]:
        try:
            return self.serde.dumps_typed(value)
        except Exception as error:  # a serializer may raise anything: name the value
            type_name = f"{type(value).__module__}.{type(value).__qualname__}"
            raise SerializationError(
                f"LangGraph's serializer ({type(self.serde).__name__}) cannot serialize {name!r} of type "
                f"{type_name}: {error}. Keep such objects out of the graph's state, or give the saver a "
                "serializer that handles them (DurableSaver(store, serde=…)).",
                name=name,
                type_name=type_name,
            ) from error

    def _manifest(
        self,
        checkpoint: Checkpoint,
        new_versions: ChannelVersions,
        base: tuple[Any, ...],
        encoded: dict[str, tuple[str, list[Blob]]],
    ) -> tuple[dict[str, str], list[Blob]]:
        """Return the new checkpoint's channel -> address and the blobs to store.

        A channel whose version is the one the parent checkpoint stored keeps its address: its
        value is neither serialized nor written again.
        """
        base_versions, base_manifest = base[0], base[1]
        values = checkpoint.get("channel_values") or {}
        manifest: dict[str, str] = {}
        blobs: list[Blob] = []
        fresh = {}
        for channel, version in (checkpoint.get("channel_versions") or {}).items():
            if channel not in new_versions and base_versions.get(channel) == version and channel in base_manifest:
                manifest[channel] = base_manifest[channel]
            elif channel in encoded:
                manifest[channel] = encoded[channel][0]
                blobs.extend(encoded[channel][1])
            elif channel in values:
                fresh[channel] = self._dumps(channel, values[channel])
        if fresh:
            addresses, more = ValueCodec(self.store, self._secret).encode(fresh)
            by_address = {blob.hash: blob for blob in more}
            for channel, value_address in addresses.items():
                mine = [by_address[value_address]] if value_address in by_address else []
                encoded[channel] = (value_address, mine)
                manifest[channel] = value_address
            blobs.extend(more)
        return manifest, list({blob.hash: blob for blob in blobs}.values())

    async def _tuples(
        self,
        thread_id: str,
        ns: str,
        run_id: str,
        records: list[CheckpointRecord],
        decisions: Mapping[str, list[CheckpointRecord]] | None = None,
    ) -> list[CheckpointTuple]:
        """Load stored checkpoints of one run with their values and pending writes (and, as
        resume writes, the decisions recorded at their gates)."""
        by_seq = await self.store.states_at(run_id, [record.seq for record in records])
        prefix = write_prefix(lg(records[0])["id"]) if len(records) == 1 else WRITE_KEYS
        stored_writes = dict(await self.store.keyed_results(run_id, prefix))
        # Each checkpoint's writes, found once (not a scan of every write per checkpoint).
        keys_of: dict[str, list[str]] = {}
        for key in stored_writes:
            keys_of.setdefault(checkpoint_of_write(key), []).append(key)
        manifests: dict[Any, dict[str, str]] = {i: by_seq[record.seq].manifest for i, record in enumerate(records)}
        manifests["writes"] = stored_writes
        values = ValueCodec(self.store, self._secret)
        loaded = await values.load_many(manifests)
        written = loaded["writes"]
        # A write names its value's address; the value is the blob a channel holding it names too.
        typed = await values.load({w[4]: w[4] for w in written.values()}) if written else {}
        found = []
        for i, record in enumerate(records):
            keys = keys_of.get(lg(record)["id"], [])
            writes = pick_writes([(key, written[key]) for key in keys])
            pending = [(w[0], w[1], self.serde.loads_typed(typed[w[4]])) for w in writes]
            made = (decisions or {}).get(record.checkpoint_id)
            if made:
                paths = {w[0]: w[2] for w in writes}
                stamps = {written[k][0]: int(k.rsplit(":", 1)[1]) for k in keys if written[k][1] == RESUME}
                pending = with_decisions(pending, paths, stamps, made)
            found.append(
                tuple_of(
                    thread_id,
                    ns,
                    record,
                    {channel: self.serde.loads_typed(value) for channel, value in loaded[i].items()},
                    pending,
                )
            )
        return found

    # -- the saver's methods --------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Return a checkpoint of a thread (its latest unless the config names one), or None."""
        _invocation.set(_Invocation())
        thread_id, ns = address(config)
        checkpoint_id = checkpoint_id_of(config)
        for fresh in (False, True):
            run_id = await self._find_run(thread_id, ns, fresh)
            if run_id is None:
                return None
            latest, decisions = await self._latest(run_id)
            if checkpoint_id is None:
                record = latest
            else:
                try:
                    record = await self.store.get_checkpoint(run_id, our_id(checkpoint_id, run_id))
                except CheckpointNotFound:
                    record = None
            if record is not None and is_lg(record):
                found = {record.checkpoint_id: decisions} if latest is not None and record.seq == latest.seq else {}
                return (await self._tuples(thread_id, ns, run_id, [record], found))[0]
        return None

    async def _latest(self, run_id: str) -> tuple[CheckpointRecord | None, list[CheckpointRecord]]:
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

    async def _list(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> list[CheckpointTuple]:
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
            raise InvalidInput(f"limit is a number of checkpoints (0 or more) or None for all, not {limit!r}.")
        if filter is not None and not isinstance(filter, Mapping):
            raise InvalidInput(
                f"filter is a dict of metadata values to match, e.g. {{'source': 'loop'}}, not {filter!r}."
            )
        if config is None:
            runs = [run for run in await self.store.list_runs() if isinstance(run.meta.get(META), dict)]
        else:
            thread_id, ns = address(config)
            runs = await self._thread_runs(thread_id)
            if "checkpoint_ns" in config["configurable"]:
                runs = [run for run in runs if run.meta[META].get("checkpoint_ns") == ns]
        wanted = checkpoint_id_of(config)
        before_id = checkpoint_id_of(before) if before is not None else None
        chosen: list[tuple[str, RunRecord, CheckpointRecord]] = []
        decided: dict[str, list[CheckpointRecord]] = {}
        for run in runs:
            records = await self.store.list_checkpoints(run.run_id)
            tail = len(records)
            while tail and not is_lg(records[tail - 1]):
                tail -= 1
            if tail and tail < len(records):
                decided[records[tail - 1].checkpoint_id] = [r for r in records[tail:] if r.decision is not None]
            for record in records:
                if not is_lg(record):
                    continue
                info = lg(record)
                if wanted is not None and info["id"] != wanted:
                    continue
                if before_id is not None and not info["id"] < before_id:
                    continue
                if filter and any(info["metadata"].get(k) != v for k, v in filter.items()):
                    continue
                chosen.append((info["id"], run, record))
        # Newest first, as LangGraph's savers list: its checkpoint ids sort by time.
        chosen.sort(key=lambda item: item[0], reverse=True)
        if limit is not None:
            chosen = chosen[:limit]
        by_run: dict[str, list[CheckpointRecord]] = {}
        for _, run, record in chosen:
            by_run.setdefault(run.run_id, []).append(record)
        loaded: dict[str, CheckpointTuple] = {}
        for run in runs:
            if run.run_id in by_run:
                info = run.meta[META]
                tuples = await self._tuples(
                    info["thread_id"], info["checkpoint_ns"], run.run_id, by_run[run.run_id], decided
                )
                loaded.update((our_id(t.checkpoint["id"], run.run_id), t) for t in tuples)
        return [loaded[our_id(checkpoint_id, run.run_id)] for checkpoint_id, run, _ in chosen]

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
        for item in await self._list(config, filter, before, limit):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint as the next checkpoint of its thread's run; return its config."""
        thread_id, ns = address(config)
        checkpoint_id = checkpoint.get("id") if isinstance(checkpoint, Mapping) else None
        if not isinstance(checkpoint_id, str) or not checkpoint_id:
            raise InvalidInput(
                f"put() takes a LangGraph Checkpoint (a dict with an 'id', as LangGraph makes), not {checkpoint!r}."
            )
        parent_id = checkpoint_id_of(config)
        info = {
            "id": checkpoint_id,
            "v": checkpoint.get("v", 1),
            "ts": checkpoint.get("ts"),
            "versions": dict(checkpoint.get("channel_versions") or {}),
            "seen": {node: dict(seen) for node, seen in (checkpoint.get("versions_seen") or {}).items()},
            "updated": checkpoint.get("updated_channels"),
            "metadata": metadata_json(config, metadata),
            "parent": parent_id,
        }
        encoded: dict[str, tuple[str, list[Blob]]] = {}
        for _ in range(_ATTEMPTS):
            run_id = await self._open_run(thread_id, ns)
            if parent_id is not None:
                await _after_claim((thread_id, ns, parent_id))
            try:
                head = await self._head(run_id)
                base = await self._base(run_id, head, parent_id)
                manifest, blobs = self._manifest(checkpoint, new_versions or {}, base, encoded)
                changes: dict[str, str | None] = {k: a for k, a in manifest.items() if head.manifest.get(k) != a}
                changes.update((k, None) for k in head.manifest if k not in manifest)
                since = head.since_snapshot + 1
                snapshot = None
                if snapshot_due(since, len(manifest)):
                    snapshot, since = CheckpointState(dict(manifest), []), 0
                kind, node = node_of(info["metadata"], info["seen"], base[2])
                draft = CheckpointDraft(
                    checkpoint_id=our_id(checkpoint_id, run_id),
                    step=step_name(kind, node),
                    node_id=node,
                    status=CheckpointStatus.FORK if kind == "fork" else CheckpointStatus.OK,
                    duration=_seconds_between(base[3], info["ts"]),
                    changes=changes,
                    snapshot=snapshot,
                    # The channels this step changed: what history shows and counts the bytes of.
                    node_output={k: a for k, a in changes.items() if a is not None},
                    parent_checkpoint_id=our_id(parent_id, run_id) if parent_id else None,
                    extra={META: info},
                )
                result = await self.store.commit(
                    Commit(
                        run_id,
                        checkpoints=[draft],
                        blobs=blobs,
                        run=(moved_on := self._status_after(run_id, head, checkpoint_id)),
                        # A step stored past the thread's stop answered the gates it waited at.
                        release_interrupts=moved_on is not None and head.status is RunStatus.PAUSED,
                        expect_head_seq=head.seq,
                    )
                )
            except Conflict:
                self._heads.pop(run_id, None)  # another writer moved the thread on: read it again
                continue
            except RunNotFound:
                self._forget([run_id])  # the thread was deleted meanwhile: start it again
                continue
            self._heads[run_id] = Head(
                result.run.head_seq,
                checkpoint_id,
                info["versions"],
                manifest,
                since,
                result.run.status,
                info["seen"],
                info["ts"],
            )
            return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}}
        raise StoreError(
            f"Thread {thread_id!r} kept changing while checkpoint {checkpoint_id} was written ({_ATTEMPTS} tries): "
            "other processes write to it at the same time. Give each concurrent run its own thread_id."
        )

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
        # Not a coroutine function: LangGraph calls it before the invocation's tasks run, so a
        # resume is known to be in flight from then on (its own later writes wait for it).
        return self._put_writes(config, writes, task_id, task_path, _claim_started(config, writes, task_id))

    async def _put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
        claim: concurrent.futures.Future[None] | None,
    ) -> None:
        try:
            await self._store_writes(config, writes, task_id, task_path, claim is not None)
        except BaseException as error:
            if claim is not None:
                claim.set_exception(error)
            raise
        if claim is not None:
            claim.set_result(None)

    async def _store_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str, claims: bool
    ) -> None:
        thread_id, ns = address(config)
        checkpoint_id = checkpoint_id_of(config)
        if checkpoint_id is None:
            raise InvalidInput(
                "put_writes() takes the config of a stored checkpoint (with its checkpoint_id), as put() returns it."
            )
        if not isinstance(task_id, str) or not task_id:
            raise InvalidInput(f"task_id is the non-empty text id of the task that wrote, not {task_id!r}.")
        prefix = write_prefix(checkpoint_id)
        # Special writes (errors, interrupts) replace earlier ones of their task: stored under a
        # new key each time, the latest wins when read.
        stamp = time.time_ns()
        values, about = {}, {}
        for i, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, i)
            key = f"{prefix}s:{task_id}:{idx}:{stamp}" if idx < 0 else f"{prefix}r:{task_id}:{idx}"
            values[key] = self._dumps(channel, value)
            about[key] = [task_id, channel, task_path, idx]
        if not values:
            return
        # The value is stored as a channel holding it would be (the node's output is the next
        # checkpoint's channel value: one blob for both); a small JSON record names it.
        addresses, blobs = ValueCodec(self.store, self._secret).encode(values)
        manifest = {}
        for key, value_address in addresses.items():
            record = codec.encode([*about[key], value_address], self._secret, key)
            blobs.append(dataclasses.replace(record, parts=(value_address,)))
            manifest[key] = record.hash
        update = _status_of(writes)
        channels = {channel for channel, _ in writes}
        if not claims:
            await _after_claim((thread_id, ns, checkpoint_id))
        for _ in range(2):
            run_id = await self._open_run(thread_id, ns)
            if update is not None:
                # Before the commit: a checkpoint stored meanwhile by another thread must see it.
                self._stops[run_id] = max(checkpoint_id, self._stops.get(run_id, ""))
            gates = await self._gates(run_id, checkpoint_id, channels, writes, task_id, task_path)
            try:
                await self.store.commit(
                    Commit(run_id, blobs=blobs, idempotent=list(manifest.items()), run=update, **gates)
                )
            except RunNotFound:
                self._forget([run_id])
                continue
            except AlreadyResumed:
                lost = AlreadyResumed(
                    f"The interrupt of thread {thread_id!r} at checkpoint {checkpoint_id} was already resumed "
                    "(by another process, at a gate panel or with durable_nb.approve), or the thread is not "
                    "waiting there; this resume was not stored. See where the thread is with "
                    "graph.get_state(config)."
                )
                invocation = _invocation.get()
                if invocation is not None:
                    invocation.lost[thread_id, ns, checkpoint_id] = lost
                raise lost from None
            return

    async def _gates(
        self,
        run_id: str,
        checkpoint_id: str,
        channels: set[str],
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> dict[str, Any]:
        """Return what a commit of writes does to the run's gates: a task that stopped at
        interrupt() opens one; a resume claims the one it answers, in the same transaction."""
        if INTERRUPT not in channels and RESUME not in channels:
            return {}
        gate_id = our_id(checkpoint_id, run_id)
        pending = await self.store.pending_interrupts(run_id)
        here = [p for p in pending if p.checkpoint_id == gate_id]
        if INTERRUPT in channels:
            node = gate_node(task_path, task_id)
            if any(p.node_id == node for p in here):
                return {}  # the same interrupt stored again
            gate = gate_of(run_id, gate_id, node, dict(writes)[INTERRUPT])
            events = [
                NewEvent(EventType.GATE_OPENED, node, {"reason": gate.reason}),
                NewEvent(EventType.RUN_PAUSED, node),
            ]
            kept: list[PendingInterrupt] = [p for p in here if p.node_id != node]
            # Gates left open at checkpoints the thread has left (a replay from an earlier one) close.
            stale = len(here) != len(pending)
            return {"open_interrupts": [*kept, gate], "release_interrupts": stale, "events": events}
        if task_id != _INPUT_TASK:
            # A task's own resume write, stored once it ran: the resume that let it run was the
            # claim (a resume by map, which LangGraph stores no input write for, closes the gate
            # when the step's checkpoint is stored).
            return {}
        # Command(resume=…): the graph's input answers the interrupt the thread waits at.
        node = here[0].node_id if len(here) == 1 else ANY_NODE
        return {
            "claim": node,
            "claim_gate": gate_id,
            "status_after_claim": RunStatus.PENDING,
            "events": [NewEvent(EventType.GATE_DECIDED, None if node == ANY_NODE else node, {"resumed": True})],
        }

    async def adelete_thread(self, thread_id: str) -> None:
        """Delete a thread: every namespace's checkpoints and writes, and values nothing else uses."""
        thread_id, _ = address({"configurable": {"thread_id": thread_id}})
        runs = [run.run_id for run in await self._thread_runs(thread_id)]
        if runs:
            await self.store.delete_runs(runs)
            self._forget(runs)
            await self._collect()

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete every checkpoint (and its writes) made by the given LangGraph runs, in any thread."""
        ids = _texts(run_ids, "run_ids", "LangGraph run ids (metadata['run_id'])")
        found = await self.store.checkpoints_by_extra(("langgraph", "metadata", "run_id"), ids)
        doomed: dict[str, list[tuple[int, str]]] = {}
        for record in found:
            doomed.setdefault(record.run_id, []).append((record.seq, write_prefix(lg(record)["id"])))
        await self.store.forget_checkpoints(doomed)
        touched = list(doomed)
        if touched:
            self._forget(touched)
            await self._collect()

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread's checkpoints and writes to another thread; the values are shared, not copied."""
        source, _ = address({"configurable": {"thread_id": source_thread_id}})
        target, _ = address({"configurable": {"thread_id": target_thread_id}})
        if source == target:
            raise InvalidInput(f"copy_thread() copies a thread to another one; both are {source!r}.")
        for run in await self._thread_runs(source):
            records = await self.store.list_checkpoints(run.run_id)
            if not records:
                continue
            # Decisions recorded at the thread's gates stay with it: the copy starts unclaimed.
            records = [record for record in records if is_lg(record)]
            ns = run.meta[META]["checkpoint_ns"]
            copy_id = await self._open_run(target, ns)
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
            writes = await self.store.keyed_results(run.run_id, WRITE_KEYS)
            await self.store.commit(Commit(copy_id, checkpoints=drafts, idempotent=writes))
            self._heads.pop(copy_id, None)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prune threads: ``"keep_latest"`` keeps each namespace's latest checkpoint, ``"delete"`` deletes all."""
        if strategy not in _STRATEGIES:
            raise InvalidInput(f"prune() strategy is 'keep_latest' or 'delete', not {strategy!r}.")
        threads = _texts(thread_ids, "thread_ids", "thread ids")
        runs = [run for thread_id in threads for run in await self._thread_runs(thread_id)]
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
                    doomed[run_id] = [
                        (r.seq, write_prefix(lg(r)["id"] if is_lg(r) else r.checkpoint_id)) for r in records[:latest]
                    ]
            if not doomed:
                return
            await self.store.forget_checkpoints(doomed)
        self._forget(run_ids)
        await self._collect()

    async def _collect(self) -> None:
        # Values are shared by content address across threads and runs: only those nothing refers
        # to any more may go. The store's prune with a cutoff before any run's time deletes no
        # history and collects exactly those.
        await self.store.prune(0.0)

    # -- blocking twins: LangGraph's sync graphs call these from any thread ------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Return a checkpoint of a thread (its latest unless the config names one), or None."""
        _invocation.set(_Invocation())  # here: the coroutine runs in a copy of this context
        return run_sync(self.aget_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Return checkpoints newest first, as ``alist`` yields them."""
        return iter(run_sync(self._list(config, filter, before, limit)))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint as the next checkpoint of its thread's run; return its config."""
        return run_sync(self.aput(config, checkpoint, metadata, new_versions))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """Store a task's writes under the checkpoint the config names."""
        run_sync(self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Delete a thread's checkpoints and writes."""
        run_sync(self.adelete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete every checkpoint (and its writes) made by the given LangGraph runs."""
        run_sync(self.adelete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread's checkpoints and writes to another thread."""
        run_sync(self.acopy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prune threads' checkpoints (``"keep_latest"`` or ``"delete"``)."""
        run_sync(self.aprune(thread_ids, strategy=strategy))


def _claim_started(
    config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str
) -> concurrent.futures.Future[None] | None:
    """Note a resume of this invocation as in flight (its later writes wait for it); return its future."""
    invocation = _invocation.get()
    if invocation is None or task_id != _INPUT_TASK or not any(w[0] == RESUME for w in writes):
        return None
    try:
        key = (*address(config), checkpoint_id_of(config) or "")
    except InvalidInput:
        return None  # refused when the writes are stored
    claim: concurrent.futures.Future[None] = concurrent.futures.Future()
    invocation.claims[key] = claim
    return claim


async def _after_claim(key: tuple[str, str, str]) -> None:
    """Wait for this invocation's resume at a checkpoint, if one is in flight; refuse to go on from
    a resume it lost: the winner's run goes on, not this one."""
    invocation = _invocation.get()
    if invocation is None:
        return
    claim = invocation.claims.get(key)
    if claim is not None and not claim.done():
        try:
            await asyncio.wrap_future(claim)
        except Exception:  # noqa: BLE001 - the resume's own caller reports how it failed
            pass
    lost = invocation.lost.get(key)
    if lost is not None:
        raise AlreadyResumed(str(lost))


def _seconds_between(start: str | None, end: str | None) -> float | None:
    """Return the seconds between two LangGraph checkpoint times (ISO text), if both are known."""
    if not start or not end:
        return None
    try:
        seconds = (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except (TypeError, ValueError):
        return None
    return seconds if seconds >= 0 else None


def _status_of(writes: Sequence[tuple[str, Any]]) -> RunUpdate | None:
    """A thread that stopped at an interrupt is paused, one whose task failed is failed, as the run shows."""
    channels = {channel: value for channel, value in writes}
    if INTERRUPT in channels:
        return RunUpdate(status=RunStatus.PAUSED)
    if ERROR in channels:
        error = channels[ERROR]
        return RunUpdate(status=RunStatus.FAILED, error=str(error), error_type=type(error).__name__)
    return None


def _texts(items: Sequence[str], name: str, what: str) -> list[str]:
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence | set | frozenset):
        raise InvalidInput(f"{name} is a list of {what}, not {items!r}; pass [{items!r}] for one.")
    bad = [item for item in items if not isinstance(item, str) or not item]
    if bad:
        raise InvalidInput(f"{name} holds {what} as text; {bad[0]!r} is not one.")
    return list(items)
