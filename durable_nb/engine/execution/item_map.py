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

from ..._loop import blocking
from ...errors import ConfigurationError, InvalidInput, NoActiveNode
from ..agents.journal import Step
from ..workflows.definition import check_concurrency
from ..workflows.graph import NodeSpec
from .attempts import Attempter
from .executors import LOCAL, check_executor
from .map_driver import Finished, drive_items
from .scope import NodeScope, current_scope

__all__ = ["amap_items", "map_items"]

_STEP_TYPE = "map_item"


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

    Call it inside a ``%%durable`` cell or a workflow node: each item is a checkpoint of that run
    (``item:<i>`` of ``map:<name>``). Items that finish together share one commit.

    Args:
        fn: Called once per item with the item; its result must pickle.
        items: The items (read once, in order).
        executor: A Dask client or any ``concurrent.futures.Executor`` to run the items on
            (default: threads of this process).
        name: Tells two maps of one cell apart: give each its own.
        max_concurrency: The most items in flight (default 8 here, all of them on an executor).
        retry_count: Retries of an item that raised, before it fails.
        timeout_seconds: An item running longer fails (and is retried as above).

    Returns:
        The results, in the order of ``items``.

    Raises:
        NoActiveNode: Called outside a ``%%durable`` cell or a node.
        InvalidInput: ``fn`` is not callable, or a bad name, retry count, timeout or limit.
        ConfigurationError: Called on an executor's worker, or a bad ``executor``.
        Exception: The error of the first item that failed for good, raised once the other items
            ended (the finished ones stay committed); its note says which item.
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
    # The items committed since the node (the cell) last finished: an indexed lookup of the node's
    # latest rows, not a read of the run.
    found = await scope.store.unfinished_steps(scope.run_id, node_id, path)
    stored = {str(c.item_index): (c.node_input or {})["value"] for c in found if c.item_index is not None}
    loaded = await scope.steps.values.load(stored)
    results = {int(i): v for i, v in loaded.items() if int(i) < len(items)}
    todo = [i for i in range(len(items)) if i not in results]
    shown = _Progress(scope.steps.progress, name, len(items), len(results))
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
    hooks = _Items(scope, path, items, results, shown)
    try:
        failures = await drive_items(
            spec,
            attempter,
            todo,
            hooks,
            executor=executor,
            journal=f"{node_id}/{path}",
            # Commits one at a time (each names the run's head as its parent); items that finish
            # meanwhile share the next.
            lock=asyncio.Lock(),
            max_concurrency=max_concurrency,
        )
    finally:
        shown.finish()
    if failures:
        first = min(failures, key=lambda o: o.value)
        error = first.error
        assert error is not None
        error.add_note(
            f"(item {first.value} of map_items '{name}'; {len(results)} of {len(items)} items are committed)"
        )
        raise error
    return [results[i] for i in range(len(items))]


class _Items:
    """What map_items does with its items: an ``item:<i>`` checkpoint each, of the agent path ``map:<name>``."""

    gate_refusal = "gate() inside a map_items item is not supported; put the gate in the cell before or after the map."

    def __init__(
        self, scope: NodeScope, path: str, items: list[Any], results: dict[int, Any], shown: _Progress
    ) -> None:
        self.scope = scope
        self.path = path
        self.items = items
        self.results = results
        self.shown = shown

    def arguments(self, index: int, remote: bool) -> tuple[Any, ...]:
        """Each item is the function's one argument, here or remote."""
        return (self.items[index],)

    def encode(self, index: int, value: Any) -> tuple[dict[str, str], list[Any]]:
        """Encode an item's result as the value of its checkpoint."""
        return self.scope.steps.values.encode({"value": value})

    async def commit(self, finished: list[Finished], last: bool) -> None:
        """Commit items that finished together, a checkpoint each, in one transaction."""
        steps = [
            Step(
                node_id=self.scope.node_id,
                item_index=f.index,
                step=f"item:{f.index}",
                agent_path=self.path,
                node_input={
                    "value": f.delta["value"],
                    "duration": f.outcome.duration,
                    "attempts": f.outcome.attempts,
                },
                blobs=f.blobs + f.outcome.record_blobs,
                step_type=_STEP_TYPE,
                idempotent=f.outcome.records,
            )
            for f in finished
        ]
        await self.scope.steps.write(*steps)
        for f, step in zip(finished, steps, strict=True):
            f.outcome.end_span(step.checkpoint_id)
        for f in finished:
            self.results[f.index] = f.outcome.value
            self.shown.done()

    def failed(self, index: int) -> None:
        """Count a failed item in the progress shown."""
        self.shown.failed()


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
