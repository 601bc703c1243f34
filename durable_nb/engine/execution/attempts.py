"""Calling a node function: its scope, a hard timeout per attempt, retries with backoff."""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..._loop import call_outside_loop
from ...errors import InvalidState
from ...model import Blob, Commit, Decision, NewEvent
from ...store import codec
from ..gates.gate import Suspend
from ..state.values import check_state
from ..tracing import MAP_ITEM, NODE, enter, finish, start
from ..workflows.graph import NodeSpec
from .executors import Batch
from .policy import Attempts
from .remote import ItemPart, pack_call, rebuild_suspend
from .scope import NodeScope, enter_scope

__all__ = ["NODE_THREADS", "Attempter", "Outcome", "RemoteCall", "journal_prefix", "node_journal", "part_journal"]

Sleep = Callable[[float], Awaitable[Any]]


class _Job:
    """One call of a sync node function on a node thread, and how its caller learns the result.

    The caller leaves an asyncio future in ``waiter``, settled on its loop when the call ends: not
    a concurrent.futures.Future's condition and callbacks.
    """

    __slots__ = ("args", "cancelled", "error", "finished", "fn", "result", "waiter")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn = fn
        self.args = args
        self.finished = False
        self.cancelled = False
        self.result: Any = None
        self.error: BaseException | None = None
        self.waiter: tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]] | None = None

    def outcome(self) -> Any:
        """Return the call's result, or raise its error."""
        if self.error is not None:
            raise self.error
        return self.result

    def settle(self, waiter: asyncio.Future[Any]) -> None:
        """Pass the ended call to an asyncio future (on its loop)."""
        if waiter.done():
            return  # its awaiting task was cancelled: the result is dropped
        if self.error is not None:
            waiter.set_exception(self.error)
        else:
            waiter.set_result(self.result)


class _NodeThreads:
    """Daemon threads for sync node functions, started on demand and retired when idle.

    A timed-out or cancelled sync node cannot be stopped, only abandoned: it must neither
    starve the nodes still to run (so a busy pool grows) nor keep the process from exiting
    (so the threads are daemons, unlike ThreadPoolExecutor's).
    """

    IDLE_SECONDS = 60.0

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._idle = 0
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], *args: Any) -> _Job:
        """Start ``fn(*args)`` on an idle node thread (a new one if none is idle)."""
        job = _Job(fn, args)
        with self._lock:
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1
        self._jobs.put(job)
        if spawn:
            threading.Thread(target=self._work, name="durable-node", daemon=True).start()
        return job

    def wait(self, job: _Job, loop: asyncio.AbstractEventLoop) -> asyncio.Future[Any] | None:
        """Return an asyncio future of ``job`` on ``loop``, or None if it has already ended."""
        waiter = loop.create_future()
        with self._lock:
            if job.finished:
                return None
            job.waiter = (loop, waiter)
        return waiter

    def _work(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=self.IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0:
                        self._idle -= 1
                        return
                continue
            if not job.cancelled:  # its caller stopped waiting before it started: it never runs
                try:
                    job.result = job.fn(*job.args)
                except BaseException as error:  # noqa: BLE001 - handed to the awaiting runner
                    job.error = error
            # Idle before the caller hears of it: the node it starts next finds this thread free.
            with self._lock:
                self._idle += 1
                job.finished = True
                waiter = job.waiter
            if waiter is not None:
                loop, future = waiter
                try:
                    loop.call_soon_threadsafe(job.settle, future)
                except RuntimeError:
                    pass  # its loop is closed: nobody waits for this result any more


NODE_THREADS = _NodeThreads()


@dataclass(slots=True)
class Outcome:
    """How one node (or one map item) ended: updates, an error or a pause."""

    node_id: str
    updates: dict[str, Any] | None = None
    error: BaseException | None = None
    suspend: Suspend | None = None
    duration: float = 0.0
    attempts: int = 1
    value: Any = None
    # Updates already stored (a map's results): name to address, and the blobs to commit with it.
    stored: dict[str, tuple[str, list[Any]]] = field(default_factory=dict)
    # @idempotent results made on an executor's worker, to commit with the node: (key, address), blobs.
    records: list[tuple[str, str]] = field(default_factory=list)
    record_blobs: list[Blob] = field(default_factory=list)
    # Its trace span, ended by whoever commits the outcome (end_span).
    span: Any = None
    # The span of a map's last item, whose checkpoint is this (the map node's) commit.
    riding: Any = None

    def end_span(self, checkpoint_id: str | None = None) -> None:
        """End the outcome's span, naming the checkpoint it was committed in (or its error)."""
        if self.riding is not None:
            riding, self.riding = self.riding, None
            finish(riding, checkpoint_id if self.error is None else None)
        if self.span is not None:
            span, self.span = self.span, None
            finish(span, checkpoint_id, self.error)


def node_journal(node_id: str) -> str:
    """The key prefix of the @idempotent results that a node's calls made on an executor."""
    # The node id's length keeps "a/1" + "2" apart from "a" + "1/2".
    return f"remote/{len(node_id)}:{node_id}/"


def journal_prefix(node_id: str, part: str) -> str:
    """The key prefix of the @idempotent results of one remote call of a node (``part``: "node" or an item)."""
    return part_journal(node_journal(node_id), part)


def part_journal(calls: str, part: str) -> str:
    """The key prefix of one remote call's results under its node's prefix (``calls``, from ``node_journal``)."""
    return f"{calls}{part}/"


@dataclass(slots=True)
class RemoteCall:
    """A node or map item run on an executor: its batch, and the @idempotent results its attempts made."""

    batch: Batch
    journal: str
    known: dict[str, Any] = field(default_factory=dict)
    # Made by the attempt that succeeded: committed with the node or item.
    fresh: dict[str, Any] = field(default_factory=dict)


class Attempter:
    """Runs node functions for one run, reporting retries as events to ride the next commit."""

    def __init__(self, run_id: str, store: Any, secret: bytes, sleep: Sleep, events: list[NewEvent]) -> None:
        self.run_id = run_id
        self.store = store
        self.secret = secret
        self.sleep = sleep
        self.events = events
        # Where agents in the nodes write their checkpoints (set by the runner that drives them).
        self.steps: Any = None
        # The checkpoint the run continued from (a decision's, when one resumed it), for gate events.
        self.resumed_from: str | None = None
        # Set on an engine thread, whose lone sync nodes run inline (another thread watches the
        # run): the hook their agents write checkpoints through, on the watching thread's loop.
        self.inline: Any = None

    async def _call(
        self, spec: NodeSpec, args: tuple[Any, ...], scope: NodeScope, alone: bool, span: Any = None
    ) -> Any:
        context = contextvars.copy_context()
        context.run(enter_scope, scope)
        if span is not None:
            context.run(enter, span)  # spans the function starts are the node's children
        loop = asyncio.get_running_loop()
        call: Awaitable[Any]
        if spec.is_async:
            call = loop.create_task(spec.fn(*args), context=context)
        elif self.inline is not None and alone and spec.timeout_seconds is None:
            # No other work waits on this thread, and a cancel or a lapsing lease is another's to see.
            scope.steps = self.inline
            return call_outside_loop(context.run, spec.fn, *args)
        else:
            job = NODE_THREADS.submit(context.run, spec.fn, *args)
            waiter = NODE_THREADS.wait(job, loop)
            if waiter is None:
                return job.outcome()
            waiter.add_done_callback(lambda w: setattr(job, "cancelled", w.cancelled()))
            call = waiter
        if spec.timeout_seconds is None:
            return await call
        try:
            return await asyncio.wait_for(call, spec.timeout_seconds)
        except TimeoutError:
            raise spec.policy.timed_out(spec.label, spec.node_id) from None

    async def _call_remote(self, spec: NodeSpec, remote: RemoteCall, args: tuple[Any, ...], scope: NodeScope) -> Any:
        part = ItemPart(args=args, item_index=scope.item_index, decisions=scope.decisions, known=remote.known)
        call = remote.batch.call(pack_call(part))
        if spec.timeout_seconds is None:
            outcome = await call
        else:
            try:
                # Enforced here, at the owner: a late result is dropped with the cancelled future.
                outcome = await asyncio.wait_for(call, spec.timeout_seconds)
            except TimeoutError:
                raise spec.policy.timed_out(spec.label, spec.node_id) from None
        if outcome.calls:
            remote.known.update(outcome.calls)
            if outcome.error is None and outcome.suspend is None:
                remote.fresh.update(outcome.calls)
            else:
                # The attempt failed after paid calls: keep them now, so no later attempt pays again.
                await self.keep_calls(*self.encode_calls(remote, outcome.calls))
        if outcome.suspend is not None:
            raise rebuild_suspend(outcome.suspend)
        if outcome.error is not None:
            raise outcome.error
        return outcome.value

    def encode_calls(self, remote: RemoteCall, calls: dict[str, Any]) -> tuple[list[Blob], list[tuple[str, str]]]:
        """Return the blobs and keyed-result rows that store a worker's @idempotent results: under the
        call's key, as every @idempotent result of the run, and under the call's journal for its next attempt."""
        blobs: list[Blob] = []
        pairs: list[tuple[str, str]] = []
        for digest, value in calls.items():
            blob = codec.encode(value, self.secret, f"@idempotent result in '{remote.batch.label}'")
            blobs.append(blob)
            pairs += [(digest, blob.hash), (remote.journal + digest, blob.hash)]
        return blobs, pairs

    async def keep_calls(self, blobs: list[Blob], pairs: list[tuple[str, str]]) -> None:
        """Commit a worker's @idempotent results on their own (the item or node they belong to failed)."""
        if pairs:
            await self.store.commit(Commit(run_id=self.run_id, blobs=blobs, idempotent=pairs))

    async def known_calls(self, prefix: str) -> dict[str, dict[str, Any]]:
        """Return the @idempotent results workers made under ``prefix``, by the part of the key after it."""
        rows = await self.store.keyed_results(self.run_id, prefix)
        if not rows:
            return {}
        blobs = await self.store.get_blobs({address for _, address in rows})
        found: dict[str, dict[str, Any]] = {}
        for key, address in rows:
            part, _, digest = key[len(prefix) :].rpartition("/")
            if address in blobs:
                found.setdefault(part, {})[digest] = codec.decode(blobs[address], self.secret)
        return found

    async def run(
        self,
        spec: NodeSpec,
        args: tuple[Any, ...],
        decisions: list[Decision],
        *,
        expect_dict: bool = True,
        item_index: int | None = None,
        alone: bool = False,
        remote: RemoteCall | None = None,
    ) -> Outcome:
        """Run attempts of one node until one succeeds, pauses, or the retries are spent."""
        span = start(MAP_ITEM if item_index is not None else NODE, self.run_id, spec.node_id, item_index)
        try:
            outcome = await self._attempts(spec, args, decisions, expect_dict, item_index, alone, remote, span)
        except BaseException as error:
            finish(span, error=error if isinstance(error, Exception) else None)
            raise
        outcome.span = span
        return outcome

    async def _attempts(
        self,
        spec: NodeSpec,
        args: tuple[Any, ...],
        decisions: list[Decision],
        expect_dict: bool,
        item_index: int | None,
        alone: bool,
        remote: RemoteCall | None,
        span: Any,
    ) -> Outcome:
        started = time.perf_counter()
        attempts = Attempts(spec.policy, spec.node_id, self.events, item_index)
        for attempt in attempts:
            scope = NodeScope(
                run_id=self.run_id,
                node_id=spec.node_id,
                store=self.store,
                secret=self.secret,
                decisions=list(decisions),
                steps=self.steps,
                item_index=item_index,
                resumed_from=self.resumed_from,
            )
            try:
                if remote is None:
                    result = await self._call(spec, args, scope, alone, span)
                else:
                    result = await self._call_remote(spec, remote, args, scope)
            except Suspend as suspend:
                return Outcome(spec.node_id, suspend=suspend, duration=time.perf_counter() - started, attempts=attempt)
            except Exception as error:  # noqa: BLE001 - a node's failure is data, recorded in its checkpoint
                wait = attempts.failed(error)
                if wait is not None:
                    await self.sleep(wait)
                    continue
                return Outcome(spec.node_id, error=error, duration=time.perf_counter() - started, attempts=attempt)
            elapsed = time.perf_counter() - started
            outcome = Outcome(spec.node_id, duration=elapsed, attempts=attempt)
            if remote is not None and remote.fresh:
                outcome.record_blobs, outcome.records = self.encode_calls(remote, remote.fresh)
            if not expect_dict:
                outcome.value = result
                return outcome
            try:
                outcome.updates = check_state(result, f"The result of node '{spec.label}'", from_node=True)
            except InvalidState as error:
                outcome.error = error
                await self.keep_calls(outcome.record_blobs, outcome.records)
            return outcome
        raise AssertionError("unreachable")
