"""The node kinds beyond a plain function: a switch routes, a map runs once per item."""

from __future__ import annotations

import asyncio
import reprlib
import time
from collections.abc import Hashable, Iterable
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError, InvalidState
from ..model import CheckpointStatus, EventType, NewEvent
from .attempts import Outcome, RemoteCall, journal_prefix, node_journal
from .executors import items_in_flight, open_batch
from .graph import ITEM_KEY_PREFIX, NodeSpec
from .remote import SharedPart

if TYPE_CHECKING:
    from .runner import Runner as _Runner
else:
    _Runner = object

__all__ = ["NodeKinds"]

_SHORT = reprlib.Repr()
# Items of one map in flight at once when they run in this process and the map sets no limit.
LOCAL_CONCURRENCY = 8


class NodeKinds(_Runner):
    """The runner's switch and map nodes."""

    async def _route(self, spec: NodeSpec) -> Outcome:
        """Run a switch: choose branches, skip the others; no checkpoint of its own."""
        started = time.perf_counter()
        try:
            result = spec.fn(dict(self.state))
            if asyncio.iscoroutine(result):
                result = await result
            key, chosen = self._branches(spec, result)
        except Exception as error:  # noqa: BLE001 - a failing router fails like any node
            return Outcome(spec.node_id, error=error, duration=time.perf_counter() - started)
        async with self._guard():
            self.routes[spec.node_id] = {"key": key, "nodes": chosen}
            self.log.complete(spec.node_id)
            skipped_before = len(self.skipped)
            self.skipped.extend(n for n in self.graph.dependents(spec.node_id) if n not in chosen)
            self.graph.propagate_skips(self.log.done, self.skipped)
            self._newly_done += [spec.node_id, *self.skipped[skipped_before:]]
            self.carry.append(NewEvent(EventType.NODE_FINISHED, spec.node_id, {"route": key, "chosen": chosen}))
        return Outcome(spec.node_id, duration=time.perf_counter() - started)

    def _branches(self, spec: NodeSpec, result: Any) -> tuple[str | None, list[str]]:
        branches: dict[str, Any] | None = spec.extra.get("branches")
        dependents = self.graph.dependents(spec.node_id)
        if branches is not None:
            if result is not None and (not isinstance(result, Hashable) or result not in branches):
                raise InvalidState(
                    f"Switch '{spec.label}' chose {result!r}, which is not one of its branches {sorted(branches)}."
                )
            target = branches.get(result) if result is not None else None
            nodes = [] if target is None else [target] if isinstance(target, str) else list(target)
            key = None if result is None else str(result)
        else:
            if not (
                result is None
                or isinstance(result, str)
                or (isinstance(result, (list, tuple, set, frozenset)) and all(isinstance(n, str) for n in result))
            ):
                raise InvalidState(
                    f"Switch '{spec.label}' returned {result!r}: a switch returns the name of a node after it, "
                    "a list of such names, or None to take no branch."
                )
            nodes = [] if result is None else [result] if isinstance(result, str) else list(result)
            key = None if result is None else ",".join(nodes)
        wrong = [n for n in nodes if n not in dependents]
        if wrong:
            raise InvalidState(
                f"Switch '{spec.label}' chose {wrong}, but only nodes that run after it can be chosen: {dependents}."
            )
        return key, nodes

    async def _run_map(self, spec: NodeSpec) -> Outcome:
        """Run a map node: once per item, each item committed on its own."""
        started = time.perf_counter()
        try:
            items = self._items_of(spec)
        except Exception as error:  # noqa: BLE001 - unreadable items fail the map node
            return Outcome(spec.node_id, error=error, duration=time.perf_counter() - started)
        todo = [i for i in range(len(items)) if spec.item_key(i) not in self.manifest]
        if not todo:
            return await self._complete_map(spec, len(items), started)
        # Every item sees the state as the map found it, without the items' own results: copying
        # the run's state for each item would cost more with every item finished.
        seen = {k: v for k, v in self.state.items() if not k.startswith(ITEM_KEY_PREFIX)}
        executor = self.executor_of(spec)
        batch = None
        known: dict[str, dict[str, Any]] = {}
        if executor is not None:
            # The function and the state travel once per map; each item carries only itself.
            batch = open_batch(executor, SharedPart(spec.fn, self.run.run_id, spec.node_id, spec.label, (seen,)))
            known = await self.attempter.known_calls(node_journal(spec.node_id))
        if spec.max_concurrency is not None:
            limit = spec.max_concurrency
        elif executor is not None:
            limit = await items_in_flight(executor, len(todo), spec.timeout_seconds is not None)
        else:
            limit = LOCAL_CONCURRENCY
        gate = asyncio.Semaphore(limit)
        last: list[int | None] = [None]
        last_blobs: list[Any] = []
        last_records: list[tuple[str, str]] = []
        remaining = set(todo)
        failures: list[Outcome] = []
        finished: list[tuple[int, Outcome, dict[str, str], list[Any]]] = []

        async def one(index: int) -> None:
            # An item keeps its place until it is committed: max_concurrency then also bounds what a
            # crash can lose, however far the store falls behind the executor.
            async with gate:
                await item(index)

        async def item(index: int) -> None:
            if batch is None:
                outcome = await self.attempter.run(
                    spec, (dict(seen), items[index]), [], expect_dict=False, item_index=index
                )
            else:
                remote = RemoteCall(batch, journal_prefix(spec.node_id, str(index)), known.get(str(index), {}))
                outcome = await self.attempter.run(
                    spec, (items[index],), [], expect_dict=False, item_index=index, remote=remote
                )
            if outcome.suspend is not None:
                outcome.suspend, outcome.error = (
                    None,
                    ConfigurationError(
                        "gate() inside a map item is not supported; put the gate in a node before or after the map."
                    ),
                )
            if outcome.error is not None:
                outcome.value = index
                failures.append(outcome)
                await self.attempter.keep_calls(outcome.record_blobs, outcome.records)
                return
            try:
                delta, blobs = self.values.encode({spec.item_key(index): outcome.value})
            except Exception as error:  # noqa: BLE001 - an unserializable item result fails the node
                failures.append(Outcome(spec.node_id, error=error, attempts=outcome.attempts, value=index))
                return
            finished.append((index, outcome, delta, blobs))
            # Let the items that came back with this one (one fetch brings many) join its commit.
            await asyncio.sleep(0)
            async with self._guard():
                # Items that finished while the last commit was written share the next one: a
                # checkpoint each, in one transaction, so a busy executor is not held back by the store.
                batch_done, finished[:] = list(finished), []
                if not batch_done:
                    return  # committed with an earlier item's batch
                for done_index, _, _, _ in batch_done:
                    remaining.discard(done_index)
                held = batch_done.pop() if not remaining and not failures else None
                if batch_done:
                    await self._commit_items(spec, batch_done)
                if held is not None:
                    # The last item's commit is the node's: see _complete_map.
                    held_index, held_outcome, held_delta, held_blobs = held
                    last[0] = held_index
                    last_blobs.extend(held_blobs + held_outcome.record_blobs)
                    last_records.extend(held_outcome.records)
                    self.state[spec.item_key(held_index)] = held_outcome.value
                    self.log.update(held_delta)

        workers = [asyncio.ensure_future(one(i)) for i in todo]
        try:
            await asyncio.gather(*workers)
        finally:
            for worker in workers:
                worker.cancel()
            if batch is not None:
                try:
                    # Items still queued on the executor are cancelled with their tasks, before the state goes.
                    await asyncio.gather(*workers, return_exceptions=True)
                finally:
                    batch.close()  # even when a second cancel interrupts the wait
        if failures:
            first = min(failures, key=lambda o: o.value)
            first.duration = time.perf_counter() - started
            return first
        outcome = await self._complete_map(spec, len(items), started, last[0], last_blobs)
        outcome.records = last_records
        return outcome

    async def _commit_items(self, spec: NodeSpec, done: list[tuple[int, Outcome, dict[str, str], list[Any]]]) -> None:
        """Commit finished items of a map, a checkpoint each, in one transaction."""
        upcoming = self.ready()
        drafts = []
        events = []
        blobs: list[Any] = []
        records: list[tuple[str, str]] = []
        for index, outcome, delta, item_blobs in done:
            self.state[spec.item_key(index)] = outcome.value
            self.log.update(delta)
            drafts.append(
                self._draft(
                    "after",
                    spec.node_id,
                    CheckpointStatus.OK,
                    upcoming,
                    node_output=delta,
                    duration=outcome.duration,
                    attempts=outcome.attempts,
                    item_index=index,
                    extra={"wave_writes": dict(self.wave_writes)},
                )
            )
            events.append(
                NewEvent(EventType.NODE_FINISHED, spec.node_id, {"item_index": index, "duration": outcome.duration})
            )
            blobs += item_blobs + outcome.record_blobs
            records += outcome.records
        await self._commit(events, checkpoints=drafts, blobs=blobs, idempotent=records)

    def _items_of(self, spec: NodeSpec) -> list[Any]:
        if not isinstance(spec.items, str):
            found = spec.items(dict(self.state))  # type: ignore[misc]
            where = "its items function returned"
        elif spec.items not in self.state:
            raise InvalidState(
                f"Map '{spec.label}' takes its items from the state value {spec.items!r}, which the run does "
                f"not have (it has {sorted(k for k in self.state if not k.startswith('__'))[:20]})."
            )
        else:
            found = self.state[spec.items]
            where = f"its items, the state value {spec.items!r}, are"
        if isinstance(found, (str, bytes)) or not isinstance(found, Iterable):
            raise InvalidState(
                f"Map '{spec.label}' runs once per item of a list (or other iterable), but {where} "
                f"{type(found).__name__}: {_SHORT.repr(found)}."
            )
        return list(found)

    async def _complete_map(
        self, spec: NodeSpec, count: int, started: float, last: int | None = None, blobs: list[Any] | None = None
    ) -> Outcome:
        # The results are the items as they were stored when each finished: assembled when read,
        # not written again as one list.
        root = self.values.list_of_items([self.manifest[spec.item_key(i)] for i in range(count)])
        results = [self.state.pop(spec.item_key(i)) for i in range(count)]
        self.log.remove(spec.item_key(i) for i in range(count))
        into = spec.into or spec.node_id
        return Outcome(
            spec.node_id,
            updates={into: results},
            duration=time.perf_counter() - started,
            value=last,
            stored={into: (root.hash, [*(blobs or []), root])},
        )
