"""Drive a workflow run: waves of nodes, one commit per finished node.

The runner owns the run (status ``running``, its owner token) while it works. Every commit
it makes expects exactly that, so a run cancelled or taken over meanwhile stops here
without writing: a late result is discarded. A node's start marker rides with the
commit before it, so the hot path costs one commit per node.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from typing import Any

from ..._loop import owns_running_loop
from ...errors import ConfigurationError, RunCancelled, StoreError
from ...model import (
    RUN_END,
    CheckpointStatus,
    Decision,
    EventType,
    NewEvent,
    RunRecord,
    RunStatus,
    RunUpdate,
)
from ...store.protocol import Store
from ..agents.journal import AgentSteps
from ..execution.attempts import Attempter, Outcome, RemoteCall, journal_prefix, node_journal
from ..execution.executors import LOCAL, open_batch
from ..execution.remote import SharedPart
from ..runs.ownership import lease_deadline
from ..runs.settle import release_after_failure
from ..runs.watch import Watch
from ..state.statelog import StateLog
from ..state.values import ValueCodec
from ..tracing import current, error_status, finish, run_span
from .engine_thread import drive_on_engine_thread
from .graph import Graph, NodeSpec
from .map_node import MapNodes
from .run_commits import RunCommits, finished
from .run_progress import RunProgress
from .stops import WaveStops, failure_text
from .switch_node import Switches

__all__ = ["Runner", "failure_text"]

Sleep = Callable[[float], Awaitable[Any]]


class Runner:
    """Executes the queue of one run from a loaded checkpoint until it pauses, fails or ends.

    It holds its helpers: where the run stands (``progress``), its commits (``commits``), the
    node kinds beyond a plain function (``switches``, ``maps``) and the commits of a wave that
    failed or paused (``stops``).
    """

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
        self.progress = RunProgress(graph, state, log, skipped, routes, resumes, head_wave_writes)
        self.commits = RunCommits(store, values, run, owner, self.progress, head_checkpoint_id)
        self.attempter = Attempter(run.run_id, store, values.secret, sleep, self.commits.carry)
        self.attempter.resumed_from = head_checkpoint_id
        self.switches = Switches(self.progress, self.commits)
        self.maps = MapNodes(self.progress, self.commits, self.attempter, self.executor_of)
        self.stops = WaveStops(self.progress, self.commits)
        self._tasks: set[asyncio.Future[Any]] = set()
        # The task driving the run while it awaits a lone node itself (no task of the node's own).
        self._awaiting_alone: asyncio.Task[Any] | None = None
        self._ended = False
        self._stopped = False
        self._announced = False
        # The run's trace span, when the caller started it (a new run stores it with the run).
        self.span: Any = None

    @property
    def state(self) -> dict[str, Any]:
        """The run's values as this runner holds them."""
        return self.progress.state

    @property
    def carry(self) -> list[NewEvent]:
        """Events to ride with the run's next commit."""
        return self.commits.carry

    def abandon(self) -> None:
        """Stop at once: the run was cancelled or taken over; in-flight work is discarded."""
        self.commits.abandoned = True
        for task in list(self._tasks):
            task.cancel()
        if self._awaiting_alone is not None:
            self._awaiting_alone.cancel()  # the lone node it awaits stops as a node task would
            self._awaiting_alone = None

    def executor_of(self, spec: NodeSpec) -> Any:
        """Return the executor a node's function runs on, or None to run it in this process."""
        executor = spec.executor if spec.executor is not None else self.executor
        return None if executor == LOCAL else executor

    # -- the run loop -------------------------------------------------------------------

    async def drive(self) -> RunRecord:
        """Run waves until the run pauses, fails or completes; return the run as it ends."""
        commits = self.commits
        span = self.span if self.span is not None else run_span(commits.run.run_id, commits.run.meta)
        failure: BaseException | None = None
        try:
            with current(span):
                return await self._drive()
        except BaseException as error:
            failure = error if isinstance(error, Exception) else None
            raise
        finally:
            if failure is None and commits.run.status is RunStatus.FAILED:
                error_status(span, commits.run.error or "the run failed")  # its node's span holds the exception
            finish(span, commits.head, failure)

    async def _drive(self) -> RunRecord:
        if owns_running_loop():
            # The sync API's loop waits for the run anyway: an engine thread runs it, lone sync
            # nodes inline, while this thread watches (no thread switch per node).
            return await drive_on_engine_thread(self)
        return await self.run_waves()

    async def run_waves(self, *, watched: bool = True) -> RunRecord:
        """Run the waves on this loop; ``watched``: with a watch of the run's lease and cancels of its own."""
        commits = self.commits
        store = commits.store
        self.attempter.steps = AgentSteps(asyncio.get_running_loop(), commits.agent_steps, commits.values)
        try:
            with Watch(store, commits.run.run_id, commits.owner, self.abandon) if watched else nullcontext() as watch:
                if watch is not None:
                    commits.watch = watch
                while not (self._ended or self._stopped):
                    if commits.abandoned:
                        # Abandoned by a watch on another thread before this wave began.
                        raise RunCancelled(f"Run {commits.run.run_id} was cancelled.")
                    wave = self.progress.ready()
                    if not wave:
                        await self._end()
                        break
                    await self._wave(wave)
        except RunCancelled:
            # Someone else settled the run (a cancel, a takeover): report it as it now stands.
            commits.run = await store.get_run(commits.run.run_id)
        except StoreError:
            raise  # released where the commit failed
        except Exception as error:
            # Never leave a run owned by a process that stopped working on it.
            commits.abandoned = True
            commits.run = await release_after_failure(store, commits.run, commits.owner, error) or commits.run
            raise
        except (asyncio.CancelledError, KeyboardInterrupt):
            # Interrupted (a cancelled task; Ctrl-C, raised here when it lands on this thread):
            # record the cancel so the run stays resumable.
            await asyncio.shield(commits.record_interrupt())
            raise
        return commits.run

    async def _end(self) -> None:
        end = self.commits.draft(RUN_END, None, CheckpointStatus.COMPLETED, [])
        await self.commits.commit(
            [NewEvent(EventType.RUN_COMPLETED)], checkpoints=[end], run=finished(RunStatus.COMPLETED)
        )
        self._ended = True

    def _start(self, spec: NodeSpec, alone: bool) -> asyncio.Future[Outcome]:
        if spec.kind == "map":
            task: asyncio.Future[Outcome] = asyncio.ensure_future(self.maps.run(spec))
        elif spec.kind == "switch":
            task = asyncio.ensure_future(self.switches.run(spec))
        elif self.executor_of(spec) is not None:
            task = asyncio.ensure_future(self._run_remote(spec))
        else:
            decisions = self.progress.resumes.get(spec.node_id, [])
            task = asyncio.ensure_future(self.attempter.run(spec, (dict(self.state),), decisions, alone=alone))
        self._tasks.add(task)
        return task

    async def _run_remote(self, spec: NodeSpec) -> Outcome:
        """Run a node's attempts on its executor; @idempotent results of earlier attempts go with it."""
        journal = journal_prefix(spec.node_id, "node")
        run_id = self.commits.run.run_id
        batch = open_batch(self.executor_of(spec), SharedPart(spec.fn, run_id, spec.node_id, spec.label))
        try:
            known = (await self.attempter.known_calls(node_journal(spec.node_id))).get("node", {})
            remote = RemoteCall(batch, journal, known)
            decisions = self.progress.resumes.get(spec.node_id, [])
            return await self.attempter.run(spec, (dict(self.state),), decisions, remote=remote)
        finally:
            batch.close()

    async def _wave(self, wave: list[str]) -> None:
        self._announced = False
        written_by = self.progress.wave_writes
        troubled: list[Outcome] = []
        alone = self.graph.nodes[wave[0]] if len(wave) == 1 else None
        if alone is not None and alone.kind not in ("map", "switch") and self.executor_of(alone) is None:
            outcome = await self._run_alone(alone)
            if self.commits.abandoned:
                raise self._cancelled_mid_node()
            await self._take(outcome, written_by, troubled, False)
        else:
            await self._run_together(wave, written_by, troubled)
        try:
            failures = [o for o in troubled if o.error is not None] if troubled else []
            if failures:
                await self.stops.commit_failure(failures)
                self._stopped = True
            elif troubled:
                await self.stops.commit_pause(troubled)
                self._stopped = True
        finally:
            for outcome in troubled:
                outcome.end_span()  # those the stop's commit did not name (or that commit failed)
        if troubled:
            return
        self.progress.wave_writes = {}
        if not self._announced:
            # Only routing ran (no commit to ride): the next wave's start rides with its first commit.
            self.carry.extend(NewEvent(EventType.NODE_STARTED, n) for n in self.progress.ready())

    def _cancelled_mid_node(self) -> RunCancelled:
        return RunCancelled(f"Run {self.commits.run.run_id} was cancelled mid-node; nothing of it was kept.")

    async def _run_alone(self, spec: NodeSpec) -> Outcome:
        """Run a wave's only node (a chain's every step) in the task driving the run.

        A task of its own would cost two turns of the loop per node; ``abandon`` cancels this
        task instead while it awaits the node, which stops the node as it would stop its task.
        """
        driving = asyncio.current_task()
        self._awaiting_alone = driving
        try:
            decisions = self.progress.resumes.get(spec.node_id, [])
            return await self.attempter.run(spec, (dict(self.state),), decisions, alone=True)
        except asyncio.CancelledError:
            # Cancelled by abandon (the run was cancelled or taken over) and by nobody else: the
            # run's cancel, not an interruption of this task.
            if not self.commits.abandoned or driving is None or driving.uncancel() > 0:
                raise
            raise self._cancelled_mid_node() from None
        finally:
            self._awaiting_alone = None

    async def _run_together(self, wave: list[str], written_by: dict[str, str], troubled: list[Outcome]) -> None:
        """Run a wave's nodes as tasks of their own, committing each as it finishes."""
        tasks = {self._start(self.graph.nodes[n], len(wave) == 1): n for n in wave}
        in_flight = set(wave)
        try:
            pending = set(tasks)
            while pending:
                done, pending = await self._next_done(pending)
                if self.commits.abandoned:
                    raise self._cancelled_mid_node()
                for task in sorted(done, key=lambda t: wave.index(tasks[t])):
                    outcome = task.result()
                    in_flight.discard(outcome.node_id)
                    await self._take(outcome, written_by, troubled, bool(in_flight))
        finally:
            for task in tasks:
                task.cancel()
                self._tasks.discard(task)

    async def _take(self, outcome: Outcome, written_by: dict[str, str], troubled: list[Outcome], busy: bool) -> None:
        """Commit a finished node's updates (``busy``: other nodes of its wave still run); keep
        the outcomes that failed or paused in ``troubled``."""
        if outcome.updates is not None:
            outcome = await self._finish_node(outcome, written_by, busy or bool(troubled))
        if outcome.error is not None or outcome.suspend is not None:
            troubled.append(outcome)

    async def _next_done(self, pending: set[asyncio.Future[Outcome]]) -> tuple[set[Any], set[Any]]:
        if len(pending) > 1:
            return await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        # A lone node (a map or a switch alone in its wave): awaiting it costs less than asyncio.wait's waiter.
        (only,) = pending
        try:
            await only
        except asyncio.CancelledError:
            if not self.commits.abandoned:
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
        clash = sorted(k for k in updates if written_by.get(k, node_id) != node_id) if written_by else []
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
        completes = True
        if spec.kind == "loop":
            iteration = int(self.state.get(spec.loop_key, 0)) + 1
            updates[spec.loop_key] = iteration
            try:
                again = iteration < spec.max_iterations and bool(spec.condition({**self.state, **updates}))  # type: ignore[misc]
            except Exception as error:  # noqa: BLE001 - a failing condition fails the loop node
                outcome.updates, outcome.error = None, error
                return outcome
            completes = not again
        fresh = {k: v for k, v in updates.items() if k not in outcome.stored} if outcome.stored else updates
        try:
            delta, blobs = self.commits.values.encode_updates(fresh, self.progress.manifest)
        except Exception as error:  # noqa: BLE001 - any encoding failure fails the node, never the engine
            outcome.updates, outcome.error = None, error
            return outcome
        for name, (address, stored_blobs) in outcome.stored.items():
            delta[name] = address
            blobs.extend(stored_blobs)
        written_by.update(dict.fromkeys(updates, node_id))
        # What the node changed: a value returned as it was is not written again or counted.
        delta = {k: h for k, h in delta.items() if self.progress.manifest.get(k) != h}
        async with self.commits.guard():
            self.state.update(updates)
            self.progress.log.update(delta)
            self.progress.resumes.pop(node_id, None)
            if completes:
                self.progress.complete(node_id)
            events = [
                NewEvent(EventType.NODE_FINISHED, node_id, {"duration": outcome.duration, "attempts": outcome.attempts})
            ]
            try:
                checkpoint_id = await self._commit_node(
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
            except BaseException:
                outcome.end_span()  # nothing of it was kept
                raise
        outcome.end_span(checkpoint_id)
        return outcome

    async def _commit_node(
        self,
        node_id: str,
        blobs: list[Any],
        events: list[NewEvent],
        wave_busy: bool,
        idempotent: list[tuple[str, str]] | None = None,
        **fields: Any,
    ) -> str:
        """Commit ``after:<node>``; when the wave is done, the next wave's start (or the end) rides along.
        Return the node's checkpoint id."""
        upcoming = self.progress.ready()
        if wave_busy:
            fields["extra"] = {"wave_writes": dict(self.progress.wave_writes)}
        checkpoints = [self.commits.draft("after", node_id, CheckpointStatus.OK, upcoming, **fields)]
        run_update: RunUpdate | None = None
        if not wave_busy:
            self._announced = True
            if upcoming:
                events = events + [NewEvent(EventType.NODE_STARTED, n) for n in upcoming]
                run_update = RunUpdate(lease_until=lease_deadline())
            else:
                checkpoints.append(self.commits.draft(RUN_END, None, CheckpointStatus.COMPLETED, []))
                events = [*events, NewEvent(EventType.RUN_COMPLETED)]
                run_update = finished(RunStatus.COMPLETED)
                self._ended = True
        await self.commits.commit(
            events, checkpoints=checkpoints, blobs=blobs, run=run_update, idempotent=idempotent or []
        )
        return checkpoints[0].checkpoint_id
