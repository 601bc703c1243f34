"""Drive a workflow run: waves of nodes, one commit per finished node.

The runner owns the run (status ``running``, its owner token) while it works. Every commit
it makes expects exactly that, so a run cancelled or taken over meanwhile stops here
without writing: a late result is discarded. A node's start marker rides with the
commit before it, so the hot path costs one commit per node.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Container
from typing import Any

from .._ids import new_id
from ..errors import ConfigurationError, RunCancelled, StoreError
from ..model import (
    RUN_END,
    CheckpointDraft,
    CheckpointStatus,
    Commit,
    Decision,
    EventType,
    NewEvent,
    RunRecord,
    RunStatus,
    RunUpdate,
    step_name,
)
from ..store.protocol import Conflict, Store
from .agents.journal import AgentSteps
from .attempts import Attempter, Outcome, RemoteCall, journal_prefix, node_journal
from .cancel import CANCELLED
from .executors import LOCAL, open_batch
from .graph import Graph, NodeSpec
from .node_kinds import NodeKinds
from .ownership import lease_deadline, release_on_interrupt
from .remote import SharedPart
from .settle import release_after_failure
from .statelog import StateLog
from .stops import WaveStops, failure_text
from .values import ValueCodec
from .watch import Watch

__all__ = ["Runner", "failure_text"]

Sleep = Callable[[float], Awaitable[Any]]
_RUNNING = frozenset({RunStatus.RUNNING})


def commit_node(commit: Commit) -> str | None:
    """Return the node a commit was about, if any (for the event that reports its failure)."""
    return next((c.node_id for c in commit.checkpoints if c.node_id is not None), None)


class _Done:
    """Completed or skipped: membership in either, without building their union."""

    def __init__(self, completed: Container[str], skipped: set[str]) -> None:
        self.completed = completed
        self.skipped = skipped

    def __contains__(self, node: object) -> bool:
        return node in self.completed or node in self.skipped


class Runner(NodeKinds, WaveStops):
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
        executor: Any = None,
    ) -> None:
        self.graph = graph
        self.executor = executor
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
        self._watch: Watch | None = None
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
        step = fields.pop("step", None) or step_name(kind, node_id)
        draft = CheckpointDraft(
            checkpoint_id=new_id(),
            step=step,
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
        except StoreError as failure:
            # Nothing of this commit was kept; the nodes in flight stop and the run is released.
            self._abandoned = True
            renewed = self._watch.lease_until if self._watch is not None else None
            settled = await release_after_failure(
                self.store, self.run, self.owner, failure, commit_node(commit), renewed
            )
            self.run = settled or self.run
            raise
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
        self,
        node_id: str,
        blobs: list[Any],
        events: list[NewEvent],
        wave_busy: bool,
        idempotent: list[tuple[str, str]] | None = None,
        **fields: Any,
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
        await self._commit(events, checkpoints=checkpoints, blobs=blobs, run=run_update, idempotent=idempotent or [])

    async def _agent_step(
        self,
        *,
        node_id: str,
        item_index: int | None,
        step: str,
        agent_path: str,
        node_input: dict[str, Any],
        blobs: list[Any],
        step_type: str,
        idempotent: list[tuple[str, str]] | None = None,
    ) -> None:
        """Commit an agent's checkpoint (or a map_items item) inside a running node: the run's queue and
        decisions carry on."""
        async with self._guard():
            draft = self._draft(
                "",
                node_id,
                CheckpointStatus.OK,
                self.ready(),
                step=step,
                agent_path=agent_path,
                node_input=node_input,
                item_index=item_index,
                iteration=None,
                extra={"step_type": step_type, "wave_writes": dict(self.wave_writes)},
            )
            await self._commit([], checkpoints=[draft], blobs=blobs, idempotent=idempotent or [])

    # -- the run loop -------------------------------------------------------------------

    async def drive(self) -> RunRecord:
        """Run waves until the run pauses, fails or completes; return the run as it ends."""
        self._lock = asyncio.Lock()
        self.attempter.steps = AgentSteps(asyncio.get_running_loop(), self._agent_step, self.values)
        try:
            with Watch(self.store, self.run.run_id, self.owner, self.abandon) as self._watch:
                while not (self._ended or self._stopped):
                    wave = self.ready()
                    if not wave:
                        await self._end()
                        break
                    await self._wave(wave)
        except RunCancelled:
            # Someone else settled the run (a cancel, a takeover): report it as it now stands.
            self.run = await self.store.get_run(self.run.run_id)
        except StoreError:
            raise  # released where the commit failed
        except Exception as error:
            # Never leave a run owned by a process that stopped working on it.
            self._abandoned = True
            self.run = await release_after_failure(self.store, self.run, self.owner, error) or self.run
            raise
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
        # A server stopping hands the run back for the next process; Ctrl-C cancels it.
        handed_back = release_on_interrupt.get()
        try:
            await self.store.commit(
                Commit(
                    run_id=self.run.run_id,
                    events=[] if handed_back else [NewEvent(EventType.RUN_CANCELLED, None, {"was": "running"})],
                    run=RunUpdate(status=RunStatus.PENDING, owner=None, lease_until=None) if handed_back else CANCELLED,
                    expect_status=_RUNNING,
                    expect_owner=self.owner,
                )
            )
        except (Conflict, StoreError):
            pass

    def _start(self, spec: NodeSpec, alone: bool) -> asyncio.Future[Outcome]:
        if spec.kind == "map":
            task: asyncio.Future[Outcome] = asyncio.ensure_future(self._run_map(spec))
        elif spec.kind == "switch":
            task = asyncio.ensure_future(self._route(spec))
        elif self.executor_of(spec) is not None:
            task = asyncio.ensure_future(self._run_remote(spec))
        else:
            task = asyncio.ensure_future(
                self.attempter.run(spec, (dict(self.state),), self.resumes.get(spec.node_id, []), alone=alone)
            )
        self._tasks.add(task)
        return task

    def executor_of(self, spec: NodeSpec) -> Any:
        """Return the executor a node's function runs on, or None to run it in this process."""
        executor = spec.executor if spec.executor is not None else self.executor
        return None if executor == LOCAL else executor

    async def _run_remote(self, spec: NodeSpec) -> Outcome:
        """Run a node's attempts on its executor; @idempotent results of earlier attempts go with it."""
        journal = journal_prefix(spec.node_id, "node")
        batch = open_batch(self.executor_of(spec), SharedPart(spec.fn, self.run.run_id, spec.node_id, spec.label))
        try:
            known = (await self.attempter.known_calls(node_journal(spec.node_id))).get("node", {})
            remote = RemoteCall(batch, journal, known)
            return await self.attempter.run(
                spec, (dict(self.state),), self.resumes.get(spec.node_id, []), remote=remote
            )
        finally:
            batch.close()

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
                blobs + outcome.record_blobs,
                events,
                wave_busy,
                idempotent=outcome.records,
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
