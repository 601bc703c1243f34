"""One driver for running a function once per item, here or on an executor: ``flow.map`` nodes
and ``map_items`` both run on it and differ only in what they commit when items finish.

Each item keeps its place (of ``max_concurrency``) until it is committed, so the limit also bounds
what a crash can lose. Items that finish while the previous commit is being written share the
next one: their caller's hook gets them together and commits a checkpoint each in one
transaction, so a busy executor is not held back by the store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ...errors import ConfigurationError
from ..workflows.graph import NodeSpec
from .attempts import Attempter, Outcome, RemoteCall, node_journal, part_journal
from .executors import Batch, items_in_flight, open_batch
from .remote import SharedPart

__all__ = ["LOCAL_CONCURRENCY", "Finished", "ItemHooks", "drive_items"]

# Items of one map in flight at once when they run in this process and the map sets no limit.
LOCAL_CONCURRENCY = 8


@dataclass(slots=True)
class Finished:
    """An item that succeeded, its value encoded (name to address) and the blobs that store it."""

    index: int
    outcome: Outcome
    delta: dict[str, str]
    blobs: list[Any]


class ItemHooks(Protocol):
    """What a caller of the driver does with its items."""

    # The error an item that calls gate() fails with.
    gate_refusal: str

    def arguments(self, index: int, remote: bool) -> tuple[Any, ...]:
        """Return the arguments of the call for item ``index`` (on an executor when ``remote``)."""
        ...

    def encode(self, index: int, value: Any) -> tuple[dict[str, str], list[Any]]:
        """Encode an item's result: its addresses by name and the blobs to store."""
        ...

    async def commit(self, finished: list[Finished], last: bool) -> None:
        """Commit items that finished together (``last``: no item is left and none failed)."""
        ...

    def failed(self, index: int) -> None:
        """Tell that an item failed for good."""
        ...


async def drive_items(
    spec: NodeSpec,
    attempter: Attempter,
    todo: list[int],
    hooks: ItemHooks,
    *,
    executor: Any,
    journal: str,
    lock: asyncio.Lock,
    shared_args: tuple[Any, ...] = (),
    max_concurrency: int | None = None,
) -> list[Outcome]:
    """Run the items ``todo`` of a map, committing them through ``hooks`` under ``lock``; return the
    failed items' outcomes (``value``: the item's index) once every item has ended."""
    batch: Batch | None = None
    failures: list[Outcome] = []
    workers: list[asyncio.Future[None]] = []
    try:
        known: dict[str, dict[str, Any]] = {}
        if executor is not None:
            # The function (and what all items share) travels once per map; each item carries only itself.
            batch = open_batch(executor, SharedPart(spec.fn, attempter.run_id, spec.node_id, spec.label, shared_args))
            known = await attempter.known_calls(node_journal(journal))
        if max_concurrency is not None:
            limit = max_concurrency
        elif executor is not None:
            limit = await items_in_flight(executor, len(todo), spec.timeout_seconds is not None)
        else:
            limit = LOCAL_CONCURRENCY
        run_item = _item_runner(spec, attempter, hooks, batch, known, journal, lock, set(todo), failures)
        gate = asyncio.Semaphore(limit)

        async def one(index: int) -> None:
            async with gate:
                await run_item(index)

        # Every item in flight at once (a cluster's default) needs no gate.
        workers = [asyncio.ensure_future(run_item(i) if limit >= len(todo) else one(i)) for i in todo]
        await asyncio.gather(*workers)
    finally:
        # Only those still running: another gather of every item would cost a callback per item.
        running = [worker for worker in workers if not worker.done()]
        for worker in running:
            worker.cancel()
        if batch is not None:
            try:
                # Items still queued on the executor are cancelled with their tasks, before the batch goes.
                if running:
                    await asyncio.gather(*running, return_exceptions=True)
            finally:
                batch.close()  # even when a second cancel interrupts the wait
    return failures


def _item_runner(
    spec: NodeSpec,
    attempter: Attempter,
    hooks: ItemHooks,
    batch: Batch | None,
    known: dict[str, dict[str, Any]],
    journal: str,
    lock: asyncio.Lock,
    remaining: set[int],
    failures: list[Outcome],
) -> Callable[[int], Awaitable[None]]:
    """Return the coroutine function that runs one item and commits it with those that finished alongside."""
    finished: list[Finished] = []
    calls = node_journal(journal)  # each item's @idempotent results under calls + "<index>/"
    # The items in ``finished`` wait for the first of them (the group's leader) to commit them all:
    # this future ends when it has (an item keeps its place of max_concurrency until then).
    group: list[asyncio.Future[None]] = []

    async def item(index: int) -> None:
        remote = None
        if batch is not None:
            part = str(index)
            remote = RemoteCall(batch, part_journal(calls, part), known.get(part, {}))
        args = hooks.arguments(index, remote is not None)
        outcome = await attempter.run(spec, args, [], expect_dict=False, item_index=index, remote=remote)
        if outcome.suspend is not None:
            outcome.suspend, outcome.error = None, ConfigurationError(hooks.gate_refusal)
        if outcome.error is not None:
            outcome.value = index
            outcome.end_span()
            failures.append(outcome)
            await attempter.keep_calls(outcome.record_blobs, outcome.records)
            hooks.failed(index)
            return
        try:
            delta, blobs = hooks.encode(index, outcome.value)
        except Exception as error:  # noqa: BLE001 - an unserializable item result fails the item
            outcome.error = error
            outcome.end_span()
            failures.append(Outcome(spec.node_id, error=error, attempts=outcome.attempts, value=index))
            await attempter.keep_calls(outcome.record_blobs, outcome.records)
            hooks.failed(index)
            return
        finished.append(Finished(index, outcome, delta, blobs))
        if group:
            # Committed by the group's leader, with no turn of the loop or wait on the lock of its own.
            # (A cancel here cancels the group's future too: items are only cancelled all at once.)
            await group[0]
            return
        done = asyncio.get_running_loop().create_future()
        group.append(done)
        try:
            # Let the items that came back with this one (one fetch brings many) join its commit.
            await asyncio.sleep(0)
            async with lock:
                together, finished[:] = list(finished), []
                group.clear()  # items finishing from now on are the next group's
                remaining.difference_update(f.index for f in together)
                try:
                    await hooks.commit(list(together), not remaining and not failures)
                finally:
                    for f in together:
                        f.outcome.end_span()  # those the hook's commit did not name (a map's last item rides later)
        finally:
            if group and group[0] is done:
                group.clear()  # cancelled before it took the group: the next item to finish leads it
            if not done.done():
                done.set_result(None)  # the group's items end with it, committed or not (its error is its own)

    return item
