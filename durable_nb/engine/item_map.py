"""``map_items``: run a function once per item inside a ``%%durable`` cell or a node, committing
each item as it finishes, here or on an executor.

Each finished item is a checkpoint of the enclosing run (step ``item:<i>``, agent path
``map:<name>``, written through the same hook an agent's turns use), so a killed kernel loses
only the items in flight: when the cell runs again, the items committed since it last finished
come back from the store and only the others are computed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

from .._loop import blocking
from ..errors import ConfigurationError, InvalidInput, NoActiveNode
from ..model import CheckpointRecord
from .attempts import Attempter, Outcome, RemoteCall, journal_prefix, node_journal
from .definition import check_concurrency
from .executors import LOCAL, Batch, check_executor, items_in_flight, open_batch
from .graph import NodeSpec
from .remote import SharedPart
from .scope import NodeScope, current_scope

__all__ = ["amap_items", "map_items"]

_STEP_TYPE = "map_item"
LOCAL_CONCURRENCY = 8


def _path(name: str) -> str:
    return f"map:{name}"


def _check(name: Any, retry_count: Any, timeout_seconds: Any, max_concurrency: Any, fn: Any) -> None:
    if not callable(fn):
        raise InvalidInput(f"map_items() runs a function once per item; {fn!r} is not callable.")
    if not isinstance(name, str) or not name or "/" in name:
        raise InvalidInput(f"name= takes non-empty text without '/', not {name!r}.")
    if not isinstance(retry_count, int) or isinstance(retry_count, bool) or retry_count < 0:
        raise InvalidInput(f"retry_count must be a whole number >= 0, not {retry_count!r}.")
    if timeout_seconds is not None and (
        not isinstance(timeout_seconds, int | float) or isinstance(timeout_seconds, bool) or not timeout_seconds > 0
    ):
        raise InvalidInput(f"timeout_seconds must be a positive number, not {timeout_seconds!r}.")
    try:
        check_concurrency(max_concurrency)
    except ConfigurationError as error:
        raise InvalidInput(str(error)) from None


async def _committed(scope: NodeScope, path: str) -> list[CheckpointRecord]:
    """The item checkpoints of this map written since the node (the cell) last finished."""
    store = scope.store
    finished = await store.node_checkpoint(scope.run_id, scope.node_id, "after:")
    since = finished.seq if finished is not None else 0
    return [
        c
        for c in await store.list_checkpoints(scope.run_id)
        if c.seq > since and c.node_id == scope.node_id and c.agent_path == path and c.item_index is not None
    ]


async def amap_items(
    fn: Callable[[Any], Any],
    items: Iterable[Any],
    *,
    executor: Any = None,
    name: str = "map",
    max_concurrency: int | None = None,
    retry_count: int = 0,
    timeout_seconds: float | None = None,
) -> list[Any]:
    """Return ``[fn(item) for item in items]``, committing each item as it finishes; a rerun after a crash
    computes only the items not committed.

    Inside a ``%%durable`` cell or a workflow node each item is a checkpoint (``item:<i>`` of
    ``map:<name>``; give two maps of one cell different names). ``executor`` (a Dask client, any
    ``concurrent.futures.Executor``) runs the items there; ``max_concurrency`` caps the items in
    flight (default 8 here, all of them on an executor). An item that fails after its ``retry_count``
    retries raises its error once the other items have ended; the finished ones stay committed.
    """
    _check(name, retry_count, timeout_seconds, max_concurrency, fn)
    executor = check_executor(executor)
    if executor == LOCAL:
        executor = None
    items = list(items)
    scope = current_scope()
    if scope is not None and scope.remote is not None:
        raise ConfigurationError("map_items() cannot run on an executor's worker; call it in the cell or node itself.")
    if scope is None or scope.steps is None:
        raise NoActiveNode(
            "map_items() commits each item to the run of the %%durable cell or workflow node it is called in; "
            "call it there (outside one, use a plain loop or the executor's own map)."
        )
    path = _path(name)
    node_id = scope.node_id
    found = await _committed(scope, path)
    loaded = await scope.steps.values.load({str(c.item_index): (c.node_input or {})["value"] for c in found})
    results = {int(i): v for i, v in loaded.items() if int(i) < len(items)}
    restored = len(results)
    todo = [i for i in range(len(items)) if i not in results]
    shown = _Progress(scope.steps.progress, name, len(items), restored)
    spec = NodeSpec(
        node_id=node_id,
        fn=fn,
        after=(),
        retry_count=retry_count,
        timeout_seconds=None if timeout_seconds is None else float(timeout_seconds),
        label=f"{node_id}/{name}",
        kind="map",
    )
    # Retries are reported by the item's note, not as run events: a cell's run has no runner to carry them.
    attempter = Attempter(scope.run_id, scope.store, scope.secret, asyncio.sleep, [])
    batch: Batch | None = None
    known: dict[str, dict[str, Any]] = {}
    journal = f"{node_id}/{path}"
    if executor is not None:
        batch = open_batch(executor, SharedPart(fn, scope.run_id, node_id, spec.label))
        known = await attempter.known_calls(node_journal(journal))
        limit = max_concurrency or await items_in_flight(executor, len(todo), timeout_seconds is not None)
    else:
        limit = max_concurrency or LOCAL_CONCURRENCY
    gate = asyncio.Semaphore(limit)
    lock = asyncio.Lock()
    failures: list[tuple[int, BaseException]] = []

    async def one(index: int) -> None:
        # An item keeps its place until it is committed, so max_concurrency bounds what a crash loses.
        async with gate:
            await item(index)

    async def item(index: int) -> None:
        remote = None
        if batch is not None:
            remote = RemoteCall(batch, journal_prefix(journal, str(index)), known.get(str(index), {}))
        outcome = await attempter.run(spec, (items[index],), [], expect_dict=False, item_index=index, remote=remote)
        if outcome.suspend is not None:
            outcome.error = ConfigurationError(
                "gate() inside a map_items item is not supported; put the gate in the cell before or after the map."
            )
        if outcome.error is not None:
            failures.append((index, outcome.error))
            await attempter.keep_calls(outcome.record_blobs, outcome.records)
            shown.failed()
            return
        async with lock:
            # One commit at a time: each names the run's head as its parent.
            await _write_item(scope, path, index, outcome)
        results[index] = outcome.value
        shown.done()

    tasks = [asyncio.ensure_future(one(i)) for i in todo]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        if batch is not None:
            try:
                await asyncio.gather(*tasks, return_exceptions=True)
            finally:
                batch.close()
        shown.finish()
    if failures:
        index, error = min(failures, key=lambda f: f[0])
        error.add_note(f"(item {index} of map_items '{name}'; {len(results)} of {len(items)} items are committed)")
        raise error
    return [results[i] for i in range(len(items))]


async def _write_item(scope: NodeScope, path: str, index: int, outcome: Outcome) -> None:
    manifest, blobs = scope.steps.values.encode({"value": outcome.value})
    await scope.steps.write(
        node_id=scope.node_id,
        item_index=index,
        step=f"item:{index}",
        agent_path=path,
        node_input={"value": manifest["value"], "duration": outcome.duration, "attempts": outcome.attempts},
        blobs=blobs + outcome.record_blobs,
        step_type=_STEP_TYPE,
        idempotent=outcome.records,
    )


class _Progress:
    """Tells the cell's progress display how many items are done (restored ones included)."""

    def __init__(self, show: Callable[..., None] | None, name: str, total: int, restored: int) -> None:
        self.show = show
        self.name = name
        self.total = total
        self.restored = restored
        self.count = restored
        self.failures = 0
        self._tell()

    def _tell(self, final: bool = False) -> None:
        if self.show is not None:
            self.show(self.name, self.count, self.total, self.restored, self.failures, final)

    def done(self) -> None:
        self.count += 1
        self._tell()

    def failed(self) -> None:
        self.failures += 1
        self._tell()

    def finish(self) -> None:
        self._tell(final=True)


map_items = blocking(amap_items)
