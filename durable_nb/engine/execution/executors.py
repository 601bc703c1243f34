"""The owner side of running nodes and map items on an executor: a Dask client or any
``concurrent.futures.Executor``.

The owner stays the one that commits: an executor only computes. Calls go out as bytes (see
``remote``); what comes back is committed by the run's owner as it arrives, one commit per item.
Cancelling the awaiting task (a timeout, a cancelled run, an interrupted cell) cancels the
call's future on the executor, so a queued item never starts; an item already running on a
worker finishes there and its result is dropped.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sys
import threading
import uuid
import warnings
from typing import Any

from ...errors import ConfigurationError
from .remote import RemoteOutcome, SharedPart, pack, run_remote, unpack

__all__ = ["LOCAL", "Batch", "check_executor", "open_batch", "usable_cores"]

# A map's shared part up to this size is sent with every item rather than once to the cluster.
INLINE_SHARED_BYTES = 1 << 20

# executor="local" runs a node in this process even when its workflow's default is an executor.
LOCAL = "local"


def usable_cores() -> int:
    """How many cores this process may run on (its CPU affinity where the system says, else all)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _dask_client_class() -> type | None:
    # Dask is optional: a Client can only exist if its module was imported.
    distributed = sys.modules.get("distributed")
    return getattr(distributed, "Client", None)


def is_dask_client(executor: Any) -> bool:
    """Whether ``executor`` is a ``dask.distributed.Client``."""
    client_class = _dask_client_class()
    return client_class is not None and isinstance(executor, client_class)


def check_executor(executor: Any) -> Any:
    """Return ``executor`` if nodes can run on it (None, "local", a Dask client or an Executor)."""
    if executor is None or executor == LOCAL:
        return executor
    if is_dask_client(executor):
        if getattr(executor, "asynchronous", False):
            raise ConfigurationError(
                "executor= takes a synchronous dask.distributed.Client; this one was made with "
                "asynchronous=True. Create it with Client(...) (the default) and pass that."
            )
        return executor
    if isinstance(executor, concurrent.futures.Executor):
        return executor
    raise ConfigurationError(
        f"executor= takes a dask.distributed.Client, a concurrent.futures.Executor (ProcessPoolExecutor, "
        f"ThreadPoolExecutor, loky's) or 'local', not {executor!r}."
    )


class Batch:
    """Calls of one node (or the items of one map) on an executor; their shared part travels once."""

    def __init__(self, shared: SharedPart) -> None:
        self.token = uuid.uuid4().hex
        self.shared = pack(shared)
        self.label = shared.label

    async def call(self, item: bytes) -> RemoteOutcome:
        """Run one call (its packed ``ItemPart``) and return its outcome."""
        raise NotImplementedError

    def close(self) -> None:
        """Forget the shared part on the executor."""


class _FuturesBatch(Batch):
    def __init__(self, executor: concurrent.futures.Executor, shared: SharedPart) -> None:
        super().__init__(shared)
        self.executor = executor

    async def call(self, item: bytes) -> RemoteOutcome:
        try:
            future = self.executor.submit(run_remote, self.token, self.shared, item)
        except concurrent.futures.BrokenExecutor as broken:
            broken.add_note(
                "A worker process of the executor died and the pool cannot take more work: create a new "
                "executor and resume the run (a Dask cluster replaces lost workers instead)."
            )
            raise
        # Cancelling the awaiting task cancels the future: a call not yet started never runs.
        packed = await asyncio.wrap_future(future)
        return _outcome(packed)


class _Queued:
    """A call waiting for the next submission to the cluster, and then its Dask future."""

    __slots__ = ("future", "item", "waiter")

    def __init__(self, item: bytes, waiter: asyncio.Future[bytes]) -> None:
        self.item = item
        self.waiter = waiter
        self.future: Any = None


class _DaskBatch(Batch):
    def __init__(self, client: Any, shared: SharedPart) -> None:
        super().__init__(shared)
        self.client = client
        self._shared_future: Any = None
        self._cancels: list[Any] = []
        self._submitted = 0
        # Calls made in one turn of the owner's loop, submitted together in the next.
        self._queued: list[_Queued] = []
        # Finished futures waiting for their results to be fetched, and the task fetching them.
        self._done: list[tuple[Any, asyncio.Future[bytes]]] = []
        self._fetching: asyncio.Future[None] | None = None

    def _shared_on_cluster(self) -> Any:
        # A small shared part travels with each item: no item then prefers the worker holding it
        # (which may be busy with a long item). A large one goes once, as the result of a task
        # that items name: when the worker holding it dies Dask computes it again (scattered data
        # would be lost with that worker, and every item after it with it).
        if len(self.shared) <= INLINE_SHARED_BYTES:
            return self.shared
        if self._shared_future is None:
            with warnings.catch_warnings():
                # Dask suggests scattering large arguments, the very thing this avoids.
                warnings.filterwarnings("ignore", message="Sending large graph")
                self._shared_future = self.client.submit(
                    _hold, self.shared, key=f"{self.label}-shared-{self.token}", pure=False
                )
        return self._shared_future

    async def call(self, item: bytes) -> RemoteOutcome:
        loop = asyncio.get_running_loop()
        queued = _Queued(item, loop.create_future())
        self._queued.append(queued)
        if len(self._queued) == 1:
            loop.call_soon(self._submit_queued, loop)
        try:
            packed = await queued.waiter
        except asyncio.CancelledError:
            if queued.future is not None:
                self._cancel_soon(queued.future)
            raise  # not submitted yet: the submission skips a call whose waiter is done
        # Released now, not when garbage collected: a result the cluster still holds is one it
        # computes again (running the item's body twice) if its worker dies before the release.
        queued.future.release()
        return _outcome(packed)

    def _submit_queued(self, loop: asyncio.AbstractEventLoop) -> None:
        # The items a map starts together reach the scheduler as one graph, as Dask's own
        # client.map sends them, instead of one message and one graph update per item.
        calls, self._queued = [c for c in self._queued if not c.waiter.done()], []
        if not calls:
            return
        # One task prefix for the whole map (Dask learns the items' duration from it and groups them
        # on its dashboard); the number makes each attempt's key unique.
        first = self._submitted + 1
        self._submitted += len(calls)
        keys = [(f"{self.label}-{self.token}", first + n) for n in range(len(calls))]
        try:
            shared = self._shared_on_cluster()
            futures = self.client.map(
                run_remote,
                [self.token] * len(calls),
                [shared] * len(calls),
                [c.item for c in calls],
                key=keys,
                pure=False,
                retries=0,
            )
        except BaseException as error:  # noqa: BLE001 - each waiting call fails with the submission's error
            for c in calls:
                if not c.waiter.done():
                    c.waiter.set_exception(error)
            return
        for c, future in zip(calls, futures, strict=True):
            c.future = future
            future.add_done_callback(self._on_cluster_done(loop, c.waiter))

    def _on_cluster_done(self, loop: asyncio.AbstractEventLoop, waiter: asyncio.Future[bytes]) -> Any:
        def finished(done: Any) -> None:
            # On Dask's one callback thread: only say so; the owner's loop fetches results in batches.
            try:
                loop.call_soon_threadsafe(self._arrived, done, waiter)
            except RuntimeError:
                pass  # the owner's loop is gone: nobody waits for this result any more

        return finished

    def _arrived(self, future: Any, waiter: asyncio.Future[bytes]) -> None:
        if waiter.done():
            return
        self._done.append((future, waiter))
        if self._fetching is None or self._fetching.done():
            self._fetching = asyncio.ensure_future(self._fetch())

    async def _fetch(self) -> None:
        # Results that finish while one batch is fetched form the next: one round trip for many items.
        while self._done:
            batch, self._done = self._done, []
            finished = [(f, w) for f, w in batch if not w.done() and f.status == "finished"]
            others = [(f, w) for f, w in batch if not w.done() and f.status != "finished"]
            if finished:
                try:
                    results = await asyncio.to_thread(self.client.gather, [f for f, _ in finished])
                except Exception:  # noqa: BLE001 - one result lost with its worker: read each on its own
                    others += finished
                else:
                    for (_, waiter), result in zip(finished, results, strict=True):
                        if not waiter.done():
                            waiter.set_result(result)
            for future, waiter in others:
                error = await asyncio.to_thread(_failure_of, future)
                if not waiter.done():
                    if error is None:
                        waiter.set_result(await asyncio.to_thread(future.result))
                    else:
                        waiter.set_exception(error)

    def _cancel_soon(self, future: Any) -> None:
        if future.done():
            # Finished: let the cluster drop its result (only scheduled; a cancel could stall a fetch).
            future.release()
            return
        # A cancelled map cancels its items together: one request to the scheduler, off the loop.
        self._cancels.append(future)
        if len(self._cancels) == 1:
            asyncio.get_running_loop().call_soon(self._flush_cancels)

    def _flush_cancels(self) -> None:
        doomed, self._cancels = self._cancels, []
        if not doomed:
            return
        threading.Thread(target=self.client.cancel, args=(doomed,), name="durable-dask-cancel", daemon=True).start()

    def close(self) -> None:
        self._flush_cancels()  # the loop may stop before the scheduled flush runs
        self._queued.clear()  # their callers are cancelled: nothing to submit
        for future, _ in self._done:
            future.release()  # fetched by nobody now
        self._done.clear()
        shared, self._shared_future = self._shared_future, None
        if shared is not None:
            shared.release()  # only schedules the release on the client's loop


def _hold(shared: bytes) -> bytes:
    """The task whose result is a map's shared part on the cluster."""
    return shared


def _failure_of(future: Any) -> BaseException | None:
    """The error a finished Dask future ended with (a cancel, a lost worker, the task's own), or None."""
    try:
        if future.cancelled():
            return concurrent.futures.CancelledError(f"Dask cancelled {future.key}")
        return future.exception()
    except BaseException as failure:  # noqa: BLE001 - reading the error failed: that is the call's error
        return failure


def _outcome(packed: Any) -> RemoteOutcome:
    outcome = unpack(packed)
    if not isinstance(outcome, RemoteOutcome):
        raise TypeError(f"the executor returned {type(outcome).__name__}, not a durable_nb outcome")
    return outcome


async def items_in_flight(executor: Any, todo: int, timed: bool) -> int:
    """How many items of a map to hand to ``executor`` at once when the map sets no max_concurrency.

    All of them, unless the items have a time limit: the owner's clock starts when it hands an
    item over, so an item must not wait in the executor's queue behind others; then as many as
    the executor runs at once (a Dask cluster's threads; the machine's cores for a pool).
    """
    if not timed:
        return max(todo, 1)
    if is_dask_client(executor):
        threads = await asyncio.to_thread(executor.nthreads)
        return max(sum(threads.values()), 1)
    return usable_cores()


def open_batch(executor: Any, shared: SharedPart) -> Batch:
    """Start a batch of calls sharing ``shared`` on ``executor`` (checked by ``check_executor``)."""
    if is_dask_client(executor):
        return _DaskBatch(executor, shared)
    return _FuturesBatch(executor, shared)
