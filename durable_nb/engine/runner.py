"""Drive a workflow run: waves of nodes, one commit per finished node.

The runner owns the run (status ``running``, its owner token) while it works. Every commit
it makes expects exactly that, so a run cancelled or taken over meanwhile stops here
without writing: a late result is discarded. A node's start marker rides with the
commit before it, so the hot path costs one commit per node.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Awaitable, Callable, Container
from typing import Any

from .._ids import new_id
from ..errors import ConfigurationError, InvalidState, NodeFailed, RunCancelled
from ..model import (
    RUN_END,
    CheckpointDraft,
    CheckpointStatus,
    Commit,
    Decision,
    EventType,
    NewEvent,
    PendingInterrupt,
    RunRecord,
    RunStatus,
    RunUpdate,
    step_name,
)
from ..store.protocol import Conflict, Store
from .attempts import Attempter, Outcome
from .cancel import CANCELLED
from .graph import ITEM_KEY_PREFIX, Graph, NodeSpec
from .ownership import lease_deadline
from .statelog import StateLog
from .values import ValueCodec
from .watch import Watch

__all__ = ["Runner", "failure_text"]

Sleep = Callable[[float], Awaitable[Any]]
_RUNNING = frozenset({RunStatus.RUNNING})


def failure_text(label: str, error: BaseException) -> str:
    """Return the error of a run whose node failed: ``Node '<label>' failed: <reason>``."""
    if isinstance(error, NodeFailed):
        return str(error)
    return f"Node '{label}' failed: {type(error).__name__}: {error}"


class _Done:
    """Completed or skipped: membership in either, without building their union."""

    def __init__(self, completed: Container[str], skipped: set[str]) -> None:
        self.completed = completed
        self.skipped = skipped

    def __contains__(self, node: object) -> bool:
        return node in self.completed or node in self.skipped


class Runner:
    """Executes the queue of one run from a loaded checkpoint until it pauses, fails or ends."""

    def __init__(
        self,
        *,
        graph: Graph,
        store: Store,
        values: ValueCodec,
        run: RunRecord,
        owner: str,
        state: dict[str, Any],
        log: StateLog,
        skipped: list[str],
        routes: dict[str, Any],
        resumes: dict[str, list[Decision]],
        head_checkpoint_id: str | None,
        sleep: Sleep,
        head_wave_writes: dict[str, str] | None = None,
    ) -> None:
        self.graph = graph
        self.store = store
        self.values = values
        self.run = run
        self.owner = owner
        self.state = state
        # The values' addresses and the completed nodes, with what changed since the last checkpoint.
        self.log = log
        self.manifest = log.manifest
        self.skipped = skipped
        self.routes = routes
        self.resumes = resumes
        self.head = head_checkpoint_id
        self.carry: list[NewEvent] = []
        self.attempter = Attempter(run.run_id, store, values.secret, sleep, self.carry)
        self._tasks: set[asyncio.Future[Any]] = set()
        self._abandoned = False
        self._ended = False
        self._stopped = False
        self._announced = False
        # Keys written by the wave in progress, kept in checkpoints so a clash survives a resume.
        self.wave_writes: dict[str, str] = dict(head_wave_writes or {})
        self._lock: asyncio.Lock | None = None
        self._ready: list[str] | None = None
        # Nodes completed or skipped since the wave was last worked out: only their dependents
        # can join it, so the next wave costs what changed, not the size of the graph.
        self._newly_done: list[str] = []

    # -- state of the run ---------------------------------------------------------------

    def ready(self) -> list[str]:
        """Return the next wave."""
        if self._ready is None:
            self._ready = self.graph.ready(self.log.done, self.skipped)
        elif self._newly_done:
            done = _Done(self.log.done, set(self.skipped))
            self._ready = self.graph.ready_after(self._ready, self.log.done, done, self._newly_done)
        self._newly_done = []
        return list(self._ready)

    def abandon(self) -> None:
        """Stop at once: the run was cancelled or taken over; in-flight work is discarded."""
        self._abandoned = True
        for task in list(self._tasks):
            task.cancel()

    def _branch_key(self, node_id: str) -> str | None:
        for dep in self.graph.nodes[node_id].after:
            route = self.routes.get(dep)
            if route is not None and node_id in route["nodes"]:
                return str(route["key"])
        return None

    # -- committing ---------------------------------------------------------------------

    def _draft(
        self, kind: str, node_id: str | None, status: CheckpointStatus, queue: list[str], **fields: Any
    ) -> CheckpointDraft:
        draft = CheckpointDraft(
            checkpoint_id=new_id(),
            step=step_name(kind, node_id),
            node_id=node_id,
            status=status,
            queue=queue,
            **self.log.draft_fields(),
            skipped=list(self.skipped),
            routes=dict(self.routes),
            branch_key=self._branch_key(node_id) if node_id in self.graph.nodes else None,
            parent_checkpoint_id=self.head,
            resumes={k: [d.to_json() for d in v] for k, v in self.resumes.items()},
            **fields,
        )
        self.head = draft.checkpoint_id
        return draft

    async def _commit(self, events: list[NewEvent], **fields: Any) -> None:
        if self._abandoned:
            raise RunCancelled(f"Run {self.run.run_id} was cancelled; its last result was discarded.")
        carried = list(self.carry)
        self.carry.clear()
        commit = Commit(
            run_id=self.run.run_id,
            events=carried + events,
            expect_status=_RUNNING,
            expect_owner=self.owner,
            seen=self.run,
            **fields,
        )
        try:
            result = await self.store.commit(commit)
        except Conflict as conflict:
            self.run = conflict.run
            self._abandoned = True
            raise RunCancelled(
                f"Run {self.run.run_id} became {conflict.run.status.value} while this process worked "
                "on it; its last result was discarded."
            ) from conflict
        self.values.mark_stored(commit.blobs)
        self.run = result.run

    def _finished(self, status: RunStatus, error: str | None = None, error_type: str | None = None) -> RunUpdate:
        return RunUpdate(status=status, error=error, error_type=error_type, owner=None, lease_until=None)

    async def _commit_node(
        self, node_id: str, blobs: list[Any], events: list[NewEvent], wave_busy: bool, **fields: Any
    ) -> None:
        """Commit ``after:<node>``; when the wave is done, the next wave's start (or the end) rides along."""
        upcoming = self.ready()
        if wave_busy:
            fields["extra"] = {"wave_writes": dict(self.wave_writes)}
        checkpoints = [self._draft("after", node_id, CheckpointStatus.OK, upcoming, **fields)]
        run_update: RunUpdate | None = None
        if not wave_busy:
            self._announced = True
            if upcoming:
                events = events + [NewEvent(EventType.NODE_STARTED, n) for n in upcoming]
                run_update = RunUpdate(lease_until=lease_deadline())
            else:
                checkpoints.append(self._draft(RUN_END, None, CheckpointStatus.COMPLETED, []))
                events = [*events, NewEvent(EventType.RUN_COMPLETED)]
                run_update = self._finished(RunStatus.COMPLETED)
                self._ended = True
        await self._commit(events, checkpoints=checkpoints, blobs=blobs, run=run_update)

    # -- the run loop -------------------------------------------------------------------

    async def drive(self) -> RunRecord:
        """Run waves until the run pauses, fails or completes; return the run as it ends."""
        self._lock = asyncio.Lock()
        try:
            with Watch(self.store, self.run.run_id, self.owner, self.abandon):
                while not (self._ended or self._stopped):
                    wave = self.ready()
                    if not wave:
                        await self._end()
                        break
                    await self._wave(wave)
        except RunCancelled:
            # Someone else settled the run (a cancel, a takeover): report it as it now stands.
            self.run = await self.store.get_run(self.run.run_id)
        except asyncio.CancelledError:
            # Interrupted (Ctrl-C, a cancelled task): record the cancel so the run stays resumable.
            await asyncio.shield(self._record_interrupt())
            raise
        return self.run

    async def _end(self) -> None:
        end = self._draft(RUN_END, None, CheckpointStatus.COMPLETED, [])
        await self._commit(
            [NewEvent(EventType.RUN_COMPLETED)], checkpoints=[end], run=self._finished(RunStatus.COMPLETED)
        )
        self._ended = True

    async def _record_interrupt(self) -> None:
        try:
            await self.store.commit(
                Commit(
                    run_id=self.run.run_id,
                    events=[NewEvent(EventType.RUN_CANCELLED, None, {"was": "running"})],
                    run=CANCELLED,
                    expect_status=_RUNNING,
                    expect_owner=self.owner,
                )
            )
        except Conflict:
            pass

    def _start(self, spec: NodeSpec, alone: bool) -> asyncio.Future[Outcome]:
        if spec.kind == "map":
            task: asyncio.Future[Outcome] = asyncio.ensure_future(self._run_map(spec))
        elif spec.kind == "switch":
            task = asyncio.ensure_future(self._route(spec))
        else:
            task = asyncio.ensure_future(
                self.attempter.run(spec, (dict(self.state),), self.resumes.get(spec.node_id, []), alone=alone)
            )
        self._tasks.add(task)
        return task

    async def _wave(self, wave: list[str]) -> None:
        self._announced = False
        tasks = {self._start(self.graph.nodes[n], len(wave) == 1): n for n in wave}
        in_flight = set(wave)
        written_by = self.wave_writes
        troubled: list[Outcome] = []
        try:
            pending = set(tasks)
            while pending:
                done, pending = await self._next_done(pending)
                if self._abandoned:
                    raise RunCancelled(f"Run {self.run.run_id} was cancelled mid-node; nothing of it was kept.")
                for task in sorted(done, key=lambda t: wave.index(tasks[t])):
                    outcome = task.result()
                    in_flight.discard(outcome.node_id)
                    if outcome.updates is not None:
                        outcome = await self._finish_node(outcome, written_by, bool(in_flight or troubled))
                    if outcome.error is not None or outcome.suspend is not None:
                        troubled.append(outcome)
        finally:
            for task in tasks:
                task.cancel()
                self._tasks.discard(task)
        failures = [o for o in troubled if o.error is not None]
        if failures:
            await self._commit_failure(failures)
        elif troubled:
            await self._commit_pause(troubled)
        if troubled:
            return
        self.wave_writes = {}
        if not self._announced:
            # Only routing ran (no commit to ride): the next wave's start rides with its first commit.
            self.carry.extend(NewEvent(EventType.NODE_STARTED, n) for n in self.ready())

    async def _next_done(self, pending: set[asyncio.Future[Outcome]]) -> tuple[set[Any], set[Any]]:
        if len(pending) > 1:
            return await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        # A lone node (a chain's every step): awaiting it costs less than asyncio.wait's waiter.
        (only,) = pending
        try:
            await only
        except asyncio.CancelledError:
            if not self._abandoned:
                raise  # this run itself was interrupted
        except BaseException:  # noqa: BLE001 - read from the task by the caller, as asyncio.wait would leave it
            pass
        return {only}, set()

    # -- node kinds -------------------------------------------------------------------------

    async def _finish_node(self, outcome: Outcome, written_by: dict[str, str], wave_busy: bool) -> Outcome:
        """Commit a node's updates, unless they clash with another node of the wave."""
        node_id = outcome.node_id
        spec = self.graph.nodes[node_id]
        updates = dict(outcome.updates or {})
        # A loop's next iteration may share a wave with its last one (a gate beside it paused the
        # wave): its own writes are no clash.
        clash = sorted(k for k in updates if written_by.get(k, node_id) != node_id)
        if clash:
            outcome.updates, outcome.error = (
                None,
                ConfigurationError(
                    f"nodes {written_by[clash[0]]!r} and {node_id!r} run in one wave "
                    f"and both write {clash}; make one run after the other or write different keys."
                ),
            )
            return outcome
        iteration = None
        finished = True
        if spec.kind == "loop":
            iteration = int(self.state.get(spec.loop_key, 0)) + 1
            updates[spec.loop_key] = iteration
            try:
                again = iteration < spec.max_iterations and bool(spec.condition({**self.state, **updates}))  # type: ignore[misc]
            except Exception as error:  # noqa: BLE001 - a failing condition fails the loop node
                outcome.updates, outcome.error = None, error
                return outcome
            finished = not again
        fresh = {k: v for k, v in updates.items() if k not in outcome.stored}
        try:
            delta, blobs = self.values.encode_updates(fresh, self.manifest)
        except Exception as error:  # noqa: BLE001 - any encoding failure fails the node, never the engine
            outcome.updates, outcome.error = None, error
            return outcome
        for name, (address, stored_blobs) in outcome.stored.items():
            delta[name] = address
            blobs.extend(stored_blobs)
        written_by.update(dict.fromkeys(updates, node_id))
        # What the node changed: a value returned as it was is not written again or counted.
        delta = {k: h for k, h in delta.items() if self.manifest.get(k) != h}
        async with self._guard():
            self.state.update(updates)
            self.log.update(delta)
            self.resumes.pop(node_id, None)
            if finished:
                self.log.complete(node_id)
                self._newly_done.append(node_id)
            events = [
                NewEvent(EventType.NODE_FINISHED, node_id, {"duration": outcome.duration, "attempts": outcome.attempts})
            ]
            await self._commit_node(
                node_id,
                blobs,
                events,
                wave_busy,
                node_output=delta,
                duration=outcome.duration,
                attempts=outcome.attempts,
                iteration=iteration,
                item_index=outcome.value if spec.kind == "map" else None,
            )
        return outcome

    def _guard(self) -> asyncio.Lock:
        assert self._lock is not None
        return self._lock

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
            if result is not None and result not in branches:
                raise InvalidState(
                    f"Switch '{spec.label}' chose {result!r}, which is not one of its branches {sorted(branches)}."
                )
            target = branches.get(result) if result is not None else None
            nodes = [] if target is None else [target] if isinstance(target, str) else list(target)
            key = None if result is None else str(result)
        else:
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
            items = list(self.state[spec.items] if isinstance(spec.items, str) else spec.items(dict(self.state)))  # type: ignore[misc]
        except Exception as error:  # noqa: BLE001 - unreadable items fail the map node
            return Outcome(spec.node_id, error=error, duration=time.perf_counter() - started)
        todo = [i for i in range(len(items)) if spec.item_key(i) not in self.manifest]
        if not todo:
            return await self._complete_map(spec, len(items), started)
        # Every item sees the state as the map found it, without the items' own results: copying
        # the run's state for each item would cost more with every item finished.
        seen = {k: v for k, v in self.state.items() if not k.startswith(ITEM_KEY_PREFIX)}
        gate = asyncio.Semaphore(spec.max_concurrency)
        last: list[int | None] = [None]
        last_blobs: list[Any] = []
        remaining = set(todo)
        failures: list[Outcome] = []

        async def one(index: int) -> None:
            async with gate:
                arguments = (dict(seen), items[index])
                outcome = await self.attempter.run(spec, arguments, [], expect_dict=False, item_index=index)
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
                return
            try:
                delta, blobs = self.values.encode({spec.item_key(index): outcome.value})
            except Exception as error:  # noqa: BLE001 - an unserializable item result fails the node
                failures.append(Outcome(spec.node_id, error=error, attempts=outcome.attempts, value=index))
                return
            async with self._guard():
                remaining.discard(index)
                self.state[spec.item_key(index)] = outcome.value
                self.log.update(delta)
                if not remaining and not failures:
                    last[0] = index
                    last_blobs.extend(blobs)
                    return  # the last item's commit is the node's: see _complete_map
                event = NewEvent(
                    EventType.NODE_FINISHED, spec.node_id, {"item_index": index, "duration": outcome.duration}
                )
                await self._commit_node(
                    spec.node_id,
                    blobs,
                    [event],
                    True,
                    node_output=delta,
                    duration=outcome.duration,
                    attempts=outcome.attempts,
                    item_index=index,
                )

        workers = [asyncio.ensure_future(one(i)) for i in todo]
        try:
            await asyncio.gather(*workers)
        finally:
            for worker in workers:
                worker.cancel()
        if failures:
            first = min(failures, key=lambda o: o.value)
            first.duration = time.perf_counter() - started
            return first
        return await self._complete_map(spec, len(items), started, last[0], last_blobs)

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

    # -- failures and pauses ------------------------------------------------------------------

    async def _commit_failure(self, failures: list[Outcome]) -> None:
        first = failures[0]
        spec = self.graph.nodes[first.node_id]
        error = first.error
        assert error is not None
        message = failure_text(spec.label, error)
        error_type = getattr(error, "error_type", "") or type(error).__name__
        trace = getattr(error, "traceback", "") or "".join(traceback.format_exception(error))
        failed_ids = [f.node_id for f in failures]
        queue = failed_ids + [n for n in self.ready() if n not in failed_ids]
        item_index = first.value if spec.kind == "map" and isinstance(first.value, int) else None
        checkpoints = [
            self._draft(
                "failed",
                first.node_id,
                CheckpointStatus.FAILED,
                queue,
                error=message,
                error_type=error_type,
                traceback=trace,
                duration=first.duration,
                attempts=first.attempts,
                item_index=item_index,
                extra={"wave_writes": dict(self.wave_writes)},
            ),
            self._draft(RUN_END, None, CheckpointStatus.FAILED, [], error=message, error_type=error_type),
        ]
        events = [
            NewEvent(
                EventType.NODE_FAILED, f.node_id, {"error": failure_text(self.graph.nodes[f.node_id].label, f.error)}
            )
            for f in failures
            if f.error is not None
        ]
        events.append(NewEvent(EventType.RUN_FAILED, first.node_id, {"error": message}))
        self._stopped = True
        await self._commit(events, checkpoints=checkpoints, run=self._finished(RunStatus.FAILED, message, error_type))

    async def _commit_pause(self, suspends: list[Outcome]) -> None:
        checkpoints: list[CheckpointDraft] = []
        interrupts: list[PendingInterrupt] = []
        events: list[NewEvent] = []
        queue = self.ready()
        now = time.time()
        for outcome in suspends:
            suspend = outcome.suspend
            assert suspend is not None
            detail = {
                "reason": suspend.reason,
                "context": suspend.context,
                "node_id": outcome.node_id,
                "agent_path": None,
                "kind": suspend.kind,
                "timeout_seconds": suspend.timeout_seconds,
                "on_timeout": suspend.on_timeout,
            }
            draft = self._draft(
                "gate",
                outcome.node_id,
                CheckpointStatus.INTERRUPTED,
                queue,
                interrupt=detail,
                duration=outcome.duration,
                extra={"wave_writes": dict(self.wave_writes)},
            )
            checkpoints.append(draft)
            interrupts.append(
                PendingInterrupt(
                    run_id=self.run.run_id,
                    node_id=outcome.node_id,
                    checkpoint_id=draft.checkpoint_id,
                    reason=suspend.reason,
                    context=suspend.context,
                    created_at=now,
                    expires_at=None if suspend.timeout_seconds is None else now + suspend.timeout_seconds,
                    on_timeout=suspend.on_timeout,
                )
            )
            events.append(NewEvent(EventType.GATE_OPENED, outcome.node_id, {"reason": suspend.reason}))
        events.append(NewEvent(EventType.RUN_PAUSED, suspends[0].node_id))
        self._stopped = True
        await self._commit(
            events,
            checkpoints=checkpoints,
            open_interrupts=interrupts,
            run=RunUpdate(status=RunStatus.PAUSED, owner=None, lease_until=None),
        )
