"""Map nodes: a function run once per item of a list, each item committed as it finishes."""

from __future__ import annotations

import reprlib
import time
from collections.abc import Callable, Iterable
from typing import Any

from ...errors import InvalidState
from ...model import CheckpointStatus, EventType, NewEvent, step_name
from ..execution.attempts import Attempter, Outcome
from ..execution.map_driver import Finished, drive_items
from ..tracing import NODE, current, start
from .graph import ITEM_KEY_PREFIX, NodeSpec
from .run_commits import RunCommits
from .run_progress import RunProgress

__all__ = ["MapNodes"]

_SHORT = reprlib.Repr()


class MapNodes:
    """Runs a run's map nodes on the map driver: ``after:<map>`` checkpoints with their item index."""

    def __init__(
        self,
        progress: RunProgress,
        commits: RunCommits,
        attempter: Attempter,
        executor_of: Callable[[NodeSpec], Any],
    ) -> None:
        self.progress = progress
        self.commits = commits
        self.attempter = attempter
        self.executor_of = executor_of

    async def run(self, spec: NodeSpec) -> Outcome:
        """Run a map node: once per item, each item committed on its own; its items' spans are its children."""
        span = start(NODE, self.commits.run.run_id, spec.node_id)
        try:
            with current(span):
                outcome = await self._run(spec)
        except BaseException:
            Outcome(spec.node_id, span=span).end_span()
            raise
        outcome.span = span
        return outcome

    async def _run(self, spec: NodeSpec) -> Outcome:
        started = time.perf_counter()
        try:
            items = self._items_of(spec)
        except Exception as error:  # noqa: BLE001 - unreadable items fail the map node
            return Outcome(spec.node_id, error=error, duration=time.perf_counter() - started)
        todo = [i for i in range(len(items)) if spec.item_key(i) not in self.progress.manifest]
        if not todo:
            return await self._complete_map(spec, len(items), started)
        # Every item sees the state as the map found it, without the items' own results: copying
        # the run's state for each item would cost more with every item finished.
        seen = {k: v for k, v in self.progress.state.items() if not k.startswith(ITEM_KEY_PREFIX)}
        hooks = _MapNodeItems(self, spec, items, seen)
        failures = await drive_items(
            spec,
            self.attempter,
            todo,
            hooks,
            executor=self.executor_of(spec),
            journal=spec.node_id,
            lock=self.commits.guard(),
            shared_args=(seen,),
            max_concurrency=spec.max_concurrency,
        )
        if failures:
            first = min(failures, key=lambda o: o.value)
            first.duration = time.perf_counter() - started
            return first
        held = hooks.held
        if held is None:
            return await self._complete_map(spec, len(items), started)
        outcome = await self._complete_map(
            spec, len(items), started, held.index, held.blobs + held.outcome.record_blobs
        )
        outcome.records = held.outcome.records
        outcome.riding = hooks.held_span
        return outcome

    async def commit_items(self, spec: NodeSpec, done: list[Finished]) -> None:
        """Commit finished items of a map, a checkpoint each, in one transaction."""
        upcoming = self.progress.ready()
        step, branch = step_name("after", spec.node_id), self.progress.branch_key(spec.node_id)
        drafts = []
        events = []
        blobs: list[Any] = []
        records: list[tuple[str, str]] = []
        for item in done:
            outcome = item.outcome
            self.progress.state[spec.item_key(item.index)] = outcome.value
            self.progress.log.update(item.delta)
            drafts.append(
                self.commits.draft(
                    "after",
                    spec.node_id,
                    CheckpointStatus.OK,
                    upcoming,
                    node_output=item.delta,
                    duration=outcome.duration,
                    attempts=outcome.attempts,
                    item_index=item.index,
                    step=step,
                    branch_key=branch,
                    extra={"wave_writes": dict(self.progress.wave_writes)},
                )
            )
            events.append(
                NewEvent(
                    EventType.NODE_FINISHED, spec.node_id, {"item_index": item.index, "duration": outcome.duration}
                )
            )
            blobs += item.blobs + outcome.record_blobs
            records += outcome.records
        await self.commits.commit(events, checkpoints=drafts, blobs=blobs, idempotent=records)
        for item, draft in zip(done, drafts, strict=True):
            item.outcome.end_span(draft.checkpoint_id)

    def _items_of(self, spec: NodeSpec) -> list[Any]:
        if not isinstance(spec.items, str):
            found = spec.items(dict(self.progress.state))  # type: ignore[misc]
            where = "its items function returned"
        elif spec.items not in self.progress.state:
            raise InvalidState(
                f"Map '{spec.label}' takes its items from the state value {spec.items!r}, which the run does "
                f"not have (it has {sorted(k for k in self.progress.state if not k.startswith('__'))[:20]})."
            )
        else:
            found = self.progress.state[spec.items]
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
        keys = [spec.item_key(i) for i in range(count)]
        manifest, state = self.progress.manifest, self.progress.state
        root = self.commits.values.list_of_items([manifest[key] for key in keys])
        results = [state.pop(key) for key in keys]
        self.progress.log.remove(keys)
        into = spec.into or spec.node_id
        return Outcome(
            spec.node_id,
            updates={into: results},
            duration=time.perf_counter() - started,
            value=last,
            stored={into: (root.hash, [*(blobs or []), root])},
        )


class _MapNodeItems:
    """What a map node does with its items: ``after:<map>`` checkpoints, the last one held for the node's commit."""

    gate_refusal = "gate() inside a map item is not supported; put the gate in a node before or after the map."

    def __init__(self, maps: MapNodes, spec: NodeSpec, items: list[Any], seen: dict[str, Any]) -> None:
        self.maps = maps
        self.spec = spec
        self.items = items
        self.seen = seen
        self.held: Finished | None = None
        self.held_span: Any = None

    def arguments(self, index: int, remote: bool) -> tuple[Any, ...]:
        """Local items get the state with them; remote ones find it in the batch's shared part."""
        return (self.items[index],) if remote else (dict(self.seen), self.items[index])

    def encode(self, index: int, value: Any) -> tuple[dict[str, str], list[Any]]:
        """Encode an item's result under its item key."""
        return self.maps.commits.values.encode({self.spec.item_key(index): value})

    async def commit(self, finished: list[Finished], last: bool) -> None:
        """Commit items; the map's last item rides with the node's own commit (see _complete_map)."""
        held = finished.pop() if last else None
        if finished:
            await self.maps.commit_items(self.spec, finished)
        if held is not None:
            self.held = held
            # Its checkpoint is the map node's own commit: its span ends with the node's.
            self.held_span, held.outcome.span = held.outcome.span, None
            self.maps.progress.state[self.spec.item_key(held.index)] = held.outcome.value
            self.maps.progress.log.update(held.delta)

    def failed(self, index: int) -> None:
        """A failed item fails the node once the others have ended: nothing to do now."""
