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
import uuid
from typing import Any

from ...errors import ConfigurationError
from .remote import RemoteOutcome, SharedPart, pack, run_remote, unpack

__all__ = ["LOCAL", "Batch", "check_executor", "open_batch", "read_outcome", "usable_cores"]

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
        return read_outcome(packed)


def read_outcome(packed: Any) -> RemoteOutcome:
    """Unpack what a worker returned: a call's outcome."""
    outcome = unpack(packed)
    if type(outcome) is tuple:  # a plain value, alone (see run_remote)
        return RemoteOutcome(value=outcome[0])
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
        from .dask_batch import DaskBatch  # Dask is optional: imported only with a client

        return DaskBatch(executor, shared)
    return _FuturesBatch(executor, shared)
