"""Drive a workflow run: waves of nodes, one commit per finished node.

The runner owns the run (status ``running``, its owner token) while it works. Every commit
it makes expects exactly that, so a run cancelled or taken over meanwhile stops here
without writing: a late result is discarded (C6).
"""

from __future__ import annotations

import asyncio
import contextvars
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .._ids import new_id
from ..errors import ConfigurationError, InvalidState, NodeFailed, NodeTimeout, RunCancelled
from ..model import (
    RUN_END,
    CheckpointDraft,
    CheckpointStatus,
    Commit,
    Decision,
    NewEvent,
    PendingInterrupt,
    RunRecord,
    RunStatus,
    RunUpdate,
    step_name,
)
from ..store.protocol import Conflict, Store
from .gates import Suspend
from .graph import Graph, NodeSpec
from .ownership import lease_deadline
from .scope import NodeScope, enter_scope
from .values import ValueCodec, check_state

__all__ = ["Runner", "backoff_seconds"]

Sleep = Callable[[float], Awaitable[Any]]
_RUNNING = frozenset({RunStatus.RUNNING})


def backoff_seconds(retry: int) -> float:
    """Return the sleep before retry ``retry`` (1-based): 1, 2, 4, 8, 16, 30, 30, … (C9)."""
    return float(min(2 ** (retry - 1), 30))


@dataclass(slots=True)
class _Outcome:
    node_id: str
    updates: dict[str, Any] | None = None
    error: BaseException | None = None
    suspend: Suspend | None = None
    duration: float = 0.0
    attempts: int = 1


def failure_text(label: str, error: BaseException) -> str:
    """Return the run error of C3: ``Node '<label>' failed: <reason>``."""
    if isinstance(error, NodeFailed):
        return str(error)
    return f"Node '{label}' failed: {type(error).__name__}: {error}"


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
        manifest: dict[str, str],
        completed: list[str],
        resumes: dict[str, list[Decision]],
        head_checkpoint_id: str | None,
        sleep: Sleep,
    ) -> None:
        self.graph = graph
        self.store = store
        self.values = values
        self.run = run
        self.owner = owner
        self.state = state
        self.manifest = manifest
        self.completed = completed
        self.resumes = resumes
        self.head = head_checkpoint_id
        self.sleep = sleep
        self._carry: list[NewEvent] = []

    # -- committing ---------------------------------------------------------------

    def _draft(
        self, kind: str, node_id: str | None, status: CheckpointStatus, queue: list[str], **fields: Any
    ) -> CheckpointDraft:
        draft = CheckpointDraft(
            checkpoint_id=new_id(),
            step=step_name(kind, node_id),
            node_id=node_id,
            status=status,
            manifest=dict(self.manifest),
            completed=list(self.completed),
            queue=queue,
            parent_checkpoint_id=self.head,
            resumes={k: [d.to_json() for d in v] for k, v in self.resumes.items()},
            **fields,
        )
        self.head = draft.checkpoint_id
        return draft

    async def _commit(self, commit: Commit) -> None:
        try:
            result = await self.store.commit(commit)
        except Conflict as conflict:
            self.run = conflict.run
            raise RunCancelled(
                f"Run {self.run.run_id} was {conflict.run.status.value} by another caller while "
                "this process worked on it; its last result was discarded."
            ) from conflict
        self.values.mark_stored(commit.blobs)
        self.run = result.run

    def _commit_for(self, events: list[NewEvent], **fields: Any) -> Commit:
        carried, self._carry = self._carry, []
        return Commit(
            run_id=self.run.run_id,
            events=carried + events,
            expect_status=_RUNNING,
            expect_owner=self.owner,
            **fields,
        )

    # -- running nodes ------------------------------------------------------------

    async def _call(self, spec: NodeSpec, scope: NodeScope) -> Any:
        context = contextvars.copy_context()
        context.run(enter_scope, scope)
        state = dict(self.state)
        if spec.is_async:
            call: Awaitable[Any] = asyncio.get_running_loop().create_task(spec.fn(state), context=context)
        else:
            call = asyncio.get_running_loop().run_in_executor(None, context.run, spec.fn, state)
        if spec.timeout_seconds is None:
            return await call
        try:
            return await asyncio.wait_for(call, spec.timeout_seconds)
        except TimeoutError:
            raise NodeTimeout(
                f"Node '{spec.label}' failed: timed out after {spec.timeout_seconds:g} s",
                node_id=spec.node_id,
                error_type="NodeTimeout",
            ) from None

    async def _attempts(self, spec: NodeSpec) -> _Outcome:
        started = time.perf_counter()
        attempts = spec.retry_count + 1
        for attempt in range(1, attempts + 1):
            scope = NodeScope(
                run_id=self.run.run_id,
                node_id=spec.node_id,
                store=self.store,
                secret=self.values.secret,
                decisions=list(self.resumes.get(spec.node_id, [])),
            )
            try:
                result = await self._call(spec, scope)
            except Suspend as suspend:
                return _Outcome(spec.node_id, suspend=suspend, duration=time.perf_counter() - started, attempts=attempt)
            except Exception as error:  # noqa: BLE001 - a node's failure is data, recorded in its checkpoint
                if attempt < attempts:
                    self._carry.append(
                        NewEvent(
                            "node_retrying",
                            spec.node_id,
                            {"attempt": attempt, "error": f"{type(error).__name__}: {error}"},
                        )
                    )
                    await self.sleep(backoff_seconds(attempt))
                    continue
                return _Outcome(spec.node_id, error=error, duration=time.perf_counter() - started, attempts=attempt)
            try:
                updates = check_state(result, f"The result of node '{spec.label}'")
            except InvalidState as error:
                return _Outcome(spec.node_id, error=error, duration=time.perf_counter() - started, attempts=attempt)
            return _Outcome(spec.node_id, updates=updates, duration=time.perf_counter() - started, attempts=attempt)
        raise AssertionError("unreachable")

    # -- the run loop -----------------------------------------------------------------

    async def drive(self) -> RunRecord:
        """Run waves until the run pauses, fails or completes; return the run as it ends."""
        try:
            wave = self.graph.ready(self.completed)
            if not wave:
                await self._commit(
                    self._commit_for(
                        [NewEvent("run_completed")],
                        checkpoints=[self._end(CheckpointStatus.COMPLETED)],
                        run=self._finished(RunStatus.COMPLETED),
                    )
                )
                return self.run
            while wave:
                wave = await self._wave(wave)
        except RunCancelled:
            pass
        return self.run

    def _end(self, status: CheckpointStatus, **fields: Any) -> CheckpointDraft:
        return self._draft(RUN_END, None, status, [], **fields)

    @staticmethod
    def _finished(status: RunStatus, error: str | None = None, error_type: str | None = None) -> RunUpdate:
        return RunUpdate(status=status, error=error, error_type=error_type, owner=None, lease_until=None)

    async def _wave(self, wave: list[str]) -> list[str]:
        tasks = {asyncio.ensure_future(self._attempts(self.graph.nodes[n])): n for n in wave}
        in_flight = set(wave)
        written_by: dict[str, str] = {}
        failures: list[_Outcome] = []
        suspends: list[_Outcome] = []
        try:
            pending = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in sorted(done, key=lambda t: wave.index(tasks[t])):
                    outcome = task.result()
                    in_flight.discard(outcome.node_id)
                    if outcome.updates is not None:
                        outcome = await self._commit_success(outcome, written_by, in_flight, failures or suspends)
                    if outcome.error is not None:
                        failures.append(outcome)
                    elif outcome.suspend is not None:
                        suspends.append(outcome)
        finally:
            for task in tasks:
                task.cancel()
        if failures:
            await self._commit_failure(failures)
            return []
        if suspends:
            await self._commit_pause(suspends)
            return []
        return self.graph.ready(self.completed)

    async def _commit_success(
        self, outcome: _Outcome, written_by: dict[str, str], in_flight: set[str], troubled: list[_Outcome]
    ) -> _Outcome:
        node_id = outcome.node_id
        updates = outcome.updates or {}
        label = self.graph.nodes[node_id].label
        clash = sorted(k for k in updates if k in written_by)
        if clash:
            other = written_by[clash[0]]
            outcome.error = ConfigurationError(
                f"Node '{label}' failed: nodes {other!r} and {node_id!r} run in one wave and both "
                f"write {clash}; make one run after the other or write different keys."
            )
            outcome.updates = None
            return outcome
        try:
            delta, blobs = self.values.encode(updates)
        except Exception as error:  # noqa: BLE001 - any encoding failure fails the node, never the engine
            outcome.error = error
            outcome.updates = None
            return outcome
        written_by.update(dict.fromkeys(updates, node_id))
        self.state.update(updates)
        self.manifest.update(delta)
        self.completed.append(node_id)
        self.resumes.pop(node_id, None)
        events = [NewEvent("node_finished", node_id, {"duration": outcome.duration, "attempts": outcome.attempts})]
        after = {"duration": outcome.duration, "attempts": outcome.attempts, "node_output": delta}
        if in_flight or troubled:
            queue = [n for n in self.graph.ready(self.completed)]
            checkpoints = [self._draft("after", node_id, CheckpointStatus.OK, queue, **after)]
            await self._commit(self._commit_for(events, checkpoints=checkpoints, blobs=blobs))
            return outcome
        upcoming = self.graph.ready(self.completed)
        checkpoints = [self._draft("after", node_id, CheckpointStatus.OK, upcoming, **after)]
        run_update = None
        if upcoming:
            # The next wave's start markers ride with this commit: one commit per node.
            events += [NewEvent("node_started", n) for n in upcoming]
            run_update = RunUpdate(lease_until=lease_deadline())
        else:
            checkpoints.append(self._end(CheckpointStatus.COMPLETED))
            events.append(NewEvent("run_completed"))
            run_update = self._finished(RunStatus.COMPLETED)
        await self._commit(self._commit_for(events, checkpoints=checkpoints, blobs=blobs, run=run_update))
        return outcome

    async def _commit_failure(self, failures: list[_Outcome]) -> None:
        first = failures[0]
        spec = self.graph.nodes[first.node_id]
        error = first.error
        assert error is not None
        message = failure_text(spec.label, error)
        error_type = getattr(error, "error_type", "") or type(error).__name__
        trace = getattr(error, "traceback", "") or "".join(traceback.format_exception(error))
        failed_ids = [f.node_id for f in failures]
        queue = failed_ids + [n for n in self.graph.ready(self.completed) if n not in failed_ids]
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
            ),
            self._end(CheckpointStatus.FAILED, error=message, error_type=error_type),
        ]
        events = [
            NewEvent(
                "node_failed",
                f.node_id,
                {"error": failure_text(self.graph.nodes[f.node_id].label, f.error or Exception())},
            )
            for f in failures
        ]
        events.append(NewEvent("run_failed", first.node_id, {"error": message}))
        await self._commit(
            self._commit_for(events, checkpoints=checkpoints, run=self._finished(RunStatus.FAILED, message, error_type))
        )

    async def _commit_pause(self, suspends: list[_Outcome]) -> None:
        checkpoints: list[CheckpointDraft] = []
        interrupts: list[PendingInterrupt] = []
        events: list[NewEvent] = []
        queue = self.graph.ready(self.completed)
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
            events.append(NewEvent("gate_opened", outcome.node_id, {"reason": suspend.reason}))
        events.append(NewEvent("run_paused", suspends[0].node_id))
        await self._commit(
            self._commit_for(
                events,
                checkpoints=checkpoints,
                open_interrupts=interrupts,
                run=RunUpdate(status=RunStatus.PAUSED, owner=None, lease_until=None),
            )
        )
