"""The calls of a node or the items of a map on a Dask cluster, as the run's owner sees them.

The calls made in one turn of the owner's loop reach the scheduler as one graph, as Dask's own
``client.map`` sends them. One thread per batch watches them finish (Dask's ``as_completed``),
fetches the results of those that finished together in one gather, and hands them to the
owner's loop in one callback: no thread hop and no wake-up of the owner's loop per item. Each is
released on the cluster as soon as its result is in hand, errors included.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import warnings
from typing import Any

from .executors import Batch, read_outcome
from .remote import RemoteOutcome, SharedPart, run_remote

__all__ = ["INLINE_SHARED_BYTES", "DaskBatch"]

# A batch sends its shared part with each item until the copies add up to this; past it the part
# goes once. A map's state holds its items, so a copy with each item would grow as their square.
INLINE_SHARED_BYTES = 4 << 20


class _Queued:
    """A call waiting for the next submission to the cluster, and then its Dask future."""

    __slots__ = ("future", "item", "waiter")

    def __init__(self, item: bytes, waiter: asyncio.Future[bytes]) -> None:
        self.item = item
        self.waiter = waiter
        self.future: Any = None


# What the watching thread hands over for one finished future: its packed outcome, or its error.
Arrived = tuple[Any, bytes | None, BaseException | None]


class DaskBatch(Batch):
    """Calls sharing one part on a Dask cluster: submitted in groups, their results fetched in groups."""

    def __init__(self, client: Any, shared: SharedPart) -> None:
        from distributed import as_completed

        super().__init__(shared)
        self.client = client
        self._shared_future: Any = None
        self._cancels: list[Any] = []
        self._submitted = 0
        self._inlined = 0  # bytes of the shared part sent with items so far
        # Calls made in one turn of the owner's loop, submitted together in the next.
        self._queued: list[_Queued] = []
        # The callers still waiting, by their future's key (read and written on the owner's loop only).
        self._waiting: dict[Any, asyncio.Future[bytes]] = {}
        self._finishing = as_completed(loop=client.loop)
        # Whether a thread watches _finishing; it stops when nothing is left to watch.
        self._watching = False
        self._lock = threading.Lock()

    def _shared_on_cluster(self, calls: int) -> Any:
        # Small copies travel with the items: no item then prefers the worker holding the part
        # (which may be busy with a long item). Past the budget it goes once, as the result of a
        # task that items name: when the worker holding it dies Dask computes it again (scattered
        # data would be lost with that worker, and every item after it with it). A map of many
        # items is spread over the workers anyway (Dask queues such "root-ish" tasks).
        if self._shared_future is None and self._inlined + len(self.shared) * calls <= INLINE_SHARED_BYTES:
            self._inlined += len(self.shared) * calls
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
        """Run one call on the cluster (submitted with the others made in this turn of the loop)."""
        loop = asyncio.get_running_loop()
        queued = _Queued(item, loop.create_future())
        self._queued.append(queued)
        if len(self._queued) == 1:
            loop.call_soon(self._submit_queued, loop)
        try:
            packed = await queued.waiter
        except asyncio.CancelledError:
            future = queued.future
            # One whose result was handed over is released already; a finished one is released
            # when its result arrives.
            if future is not None and self._waiting.pop(future.key, None) is not None and not future.done():
                self._cancel_soon(future)
            raise  # not submitted yet: the submission skips a call whose waiter is done
        return read_outcome(packed)

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
        prefix = f"{self.label}-{self.token}"  # one string for all: pickled once in the graph
        keys = [(prefix, first + n) for n in range(len(calls))]
        try:
            shared = self._shared_on_cluster(len(calls))
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
            self._waiting[future.key] = c.waiter
        self._finishing.update(futures)
        with self._lock:
            if self._watching:
                return
            self._watching = True
        threading.Thread(target=self._watch, args=(loop,), name="durable-dask-results", daemon=True).start()

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        # On a thread of its own: the futures that finished since the last look are fetched together.
        while True:
            try:
                done = self._finishing.next_batch(block=True)
            except StopIteration:
                with self._lock:
                    # Futures submitted meanwhile were added before the submitter looked at _watching.
                    if self._finishing.is_empty():
                        self._watching = False
                        return
                continue
            arrived = _results_of(self.client, done)
            try:
                loop.call_soon_threadsafe(self._deliver, arrived)
            except RuntimeError:  # the owner's loop is gone: nobody waits for these results
                self._finishing.clear()

    def _deliver(self, arrived: list[Arrived]) -> None:
        for future, packed, error in arrived:
            waiter = self._waiting.pop(future.key, None)
            if waiter is None or waiter.done():
                continue  # its caller stopped waiting
            if error is not None:
                waiter.set_exception(error)
            else:
                waiter.set_result(packed)  # type: ignore[arg-type]
        # Released now, not when garbage collected: a result the cluster still holds is one it
        # computes again (running the item's body twice) if its worker dies before the release.
        # Released from the client's loop, in one callback handed over from here: each release
        # schedules its key's release on that loop, and from this thread each would wake it.
        try:
            self.client.loop.add_callback(_release, [future for future, _packed, _error in arrived])
        except RuntimeError:  # the client's loop is closed: the cluster holds nothing for it now
            pass

    def _cancel_soon(self, future: Any) -> None:
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
        """Cancel what is still queued on the cluster, stop watching, and forget the shared part."""
        self._flush_cancels()  # the loop may stop before the scheduled flush runs
        self._queued.clear()  # their callers are cancelled: nothing to submit
        self._finishing.clear()  # the watching thread stops; results nobody reads are released with their futures
        self._waiting.clear()
        shared, self._shared_future = self._shared_future, None
        if shared is not None:
            shared.release()  # only schedules the release on the client's loop


def _release(futures: list[Any]) -> None:
    for future in futures:
        future.release()


def _results_of(client: Any, done: list[Any]) -> list[Arrived]:
    """Fetch the results of futures that ended: those that finished in one gather, the others' errors."""
    finished: list[Any] = []
    others: list[Any] = []
    for future in done:  # one look at each future's status (a property)
        (finished if future.status == "finished" else others).append(future)
    arrived: list[Arrived] = []
    if finished:
        try:
            results = client.gather(finished)
        except Exception:  # noqa: BLE001 - one result lost with its worker: read each on its own
            others += finished
        else:
            arrived += [(f, packed, None) for f, packed in zip(finished, results, strict=True)]
    for future in others:
        error = _failure_of(future)
        if error is None:
            try:
                arrived.append((future, future.result(), None))
            except BaseException as failure:  # noqa: BLE001 - handed to the call that waits for it
                arrived.append((future, None, failure))
        else:
            arrived.append((future, None, error))
    return arrived


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
