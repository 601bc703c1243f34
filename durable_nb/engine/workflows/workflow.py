"""Workflow: node functions over a state dict, run durably."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ..._ids import new_id
from ..._loop import blocking
from ...errors import (
    AlreadyResumed,
    ConfigurationError,
    InvalidInput,
    NotResumable,
    RunOwnedElsewhere,
    WorkflowMismatch,
)
from ...model import (
    CheckpointRecord,
    CheckpointState,
    Commit,
    EventType,
    NewEvent,
    NewRun,
    RunKind,
    RunRecord,
    RunStatus,
)
from ...store import resolve_store
from ...store.protocol import Conflict, Store
from ...store.secret import load_secret
from ..execution.executors import check_executor
from ..forks.forking import create_fork
from ..gates.decisions import current_run, decide, decisions_of, make_decision
from ..gates.resume import Resume
from ..runs.cancel import cancel_run
from ..runs.keys import refuse_other_input
from ..runs.ownership import active, lease_deadline, owner_alive, taking_over, this_owner
from ..runs.run import Run, load_run
from ..runs.status import describe
from ..state.statelog import StateLog
from ..state.values import ValueCodec, check_state
from ..tracing import finish, run_span, trace_meta
from .definition import GraphDefinition
from .runner import Runner

__all__ = ["Workflow"]

F = TypeVar("F", bound=Callable[..., Any])
Sleep = Callable[[float], Awaitable[Any]]


class Workflow(GraphDefinition):
    """A named graph of node functions; each finished node is committed as a checkpoint.

    Nodes are registered with the decorators :meth:`node`, :meth:`loop`, :meth:`switch` and
    :meth:`map`. Every call that runs or continues a run has an async twin (``arun``, ``aresume``,
    ``aapprove``, ``afork``, …); the sync calls work in scripts, inside a running event loop (a
    Jupyter cell) and from other threads.

    Args:
        name: The workflow's name; its runs carry it, and ``recover`` and the service find the
            workflow of a run by it.
        store: Where runs are kept: a Store, its URL or a path (default: ``durable_nb.connect()``).
        sleep: How to wait between retries (a test may pass a fake clock).
        executor: Where nodes and map items run unless they name their own: a
            ``dask.distributed.Client`` or any ``concurrent.futures.Executor`` (default: here).

    Raises:
        ConfigurationError: The name is empty, or the executor is not one.

    Example:
        >>> flow = dnb.Workflow("triage")
        >>> @flow.node()
        ... def classify(state):
        ...     return {"category": "billing"}
        >>> flow.run({"ticket": "Charged twice"}).state["category"]
        'billing'
    """

    def __init__(
        self,
        name: str,
        *,
        store: Store | str | os.PathLike[str] | None = None,
        sleep: Sleep = asyncio.sleep,
        executor: Any = None,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError(f"A workflow needs a non-empty name, not {name!r}.")
        super().__init__(name)
        # Where nodes and map items run unless they name their own executor (None: in this process).
        self.executor = check_executor(executor)
        self._store_arg = store
        self._store: Store | None = None
        self._sleep = sleep

    def __repr__(self) -> str:
        return f"Workflow({self.name!r}, nodes={list(self._graph.nodes)})"

    @property
    def store(self) -> Store:
        """The store runs are kept in (``durable_nb.connect()`` unless one was given)."""
        if self._store is None:
            self._store = resolve_store(self._store_arg)
        return self._store

    # -- starting and continuing ----------------------------------------------------------

    async def arun(self, input: Any = None, *, idempotency_key: str | None = None) -> Run:
        """Start a run with ``input`` as its state and drive it until it pauses, fails or ends.

        Args:
            input: The run's initial state, a dict with text keys (default: empty).
            idempotency_key: A key that names this run: a repeated key with the same input returns
                the first run (whatever its status) instead of starting another.

        Returns:
            The run as it stopped (``completed``, ``paused`` at a gate, ``failed`` or ``cancelled``).

        Raises:
            InvalidState: ``input`` is not a dict with text keys, or sets a name starting with ``__``.
            IdempotencyKeyReused: The key names a run started with other input.
            ConfigurationError: The graph cannot run (a cycle, an unknown ``after``).
        """
        owner = this_owner()
        values = self._values()
        state = check_state(input, "The run input")
        run_id = new_id()
        # Started before the run is written: its context is stored with the run, for the processes
        # that resume it to continue its trace.
        span = run_span(run_id)
        with active(run_id):
            try:
                record, created = await self._create(run_id, values, state, idempotency_key, owner, trace_meta(span))
            except Exception as error:
                finish(span, error=error)
                raise
            if not created:
                finish(span)
                return await load_run(self.store, record.run_id, record)
            runner = self._runner(values, record, owner, state, CheckpointState(dict(record.input_manifest), []), None)
            runner.span = span
            return await self._finish(runner)

    run = blocking(arun)

    async def astart(self, input: Any = None, *, idempotency_key: str | None = None) -> Run:
        """Create a run without running it: it waits, ``pending``, for a process with this workflow's
        code to resume it (``durable-nb serve`` does at once). A repeated key returns the first run."""
        record, _ = await self._create(new_id(), self._values(), check_state(input, "The run input"), idempotency_key)
        return await load_run(self.store, record.run_id, record)

    start = blocking(astart)

    async def _create(
        self,
        run_id: str,
        values: ValueCodec,
        state: dict[str, Any],
        idempotency_key: str | None,
        owner: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> tuple[RunRecord, bool]:
        """Write a new run (running under ``owner``, else pending); a repeated key returns the first, when
        it comes with the same input (IdempotencyKeyReused otherwise)."""
        self._graph.check()
        if idempotency_key is not None and (not isinstance(idempotency_key, str) or not idempotency_key):
            raise InvalidInput(f"idempotency_key must be non-empty text, not {idempotency_key!r}.")
        manifest, blobs = values.encode(state)
        record, created = await self.store.create_run(
            NewRun(
                run_id=run_id,
                name=self.name,
                kind=RunKind.WORKFLOW,
                status=RunStatus.RUNNING if owner else RunStatus.PENDING,
                input_manifest=manifest,
                blobs=blobs,
                idempotency_key=idempotency_key,
                owner=owner,
                lease_until=lease_deadline() if owner else None,
                meta=meta or {},
                events=[NewEvent(EventType.RUN_STARTED)]
                + ([NewEvent(EventType.NODE_STARTED, n) for n in self._graph.ready([])] if owner else []),
            )
        )
        if created:
            values.mark_stored(blobs)
        elif idempotency_key is not None:
            await refuse_other_input(record, manifest, state, values, idempotency_key)
        return record, created

    async def aresume(self, run_id: str, value: Resume | None = None) -> Run:
        """Continue a failed, cancelled, crashed or new (forked) run from its last checkpoint.

        Pass ``Resume(value)`` to answer the interrupt a paused run waits at.
        """
        self._graph.check()
        run = await current_run(self.store, run_id, await self._own_run(run_id))
        if run.status is RunStatus.PAUSED:
            if isinstance(value, Resume):
                return await self._decide(run_id, make_decision(True, value.value, None, None), None)
            raise NotResumable(
                f"Run {run_id} is paused at a gate; resume does not decide it. Approve or reject "
                f"it: flow.approve({run_id!r}) / flow.reject(...), or durable_nb.approve(...)."
            )
        if value is not None:
            raise InvalidInput(f"Run {run_id} is {run.status.value}, not waiting for a Resume value.")
        if run.status is RunStatus.COMPLETED:
            raise AlreadyResumed(
                f"Run {run_id} already completed (it has a run_end checkpoint). To run its "
                f"nodes again with other values, fork it: flow.fork({run_id!r}, state=...)."
            )
        if run.status is RunStatus.RUNNING and owner_alive(run_id, run.owner, run.lease_until):
            raise RunOwnedElsewhere(
                f"Run {run_id} is running in a live process ({run.owner}); it is never taken "
                "over. Wait for it, or cancel it with durable_nb.cancel(run_id)."
            )
        owner = this_owner()
        checkpoint = await self.store.resume_point(run_id)
        at = await self.store.state_at(run_id)
        skipped = checkpoint.skipped if checkpoint else []
        self._check_fits(run, at.completed)
        # Load before taking the run: a value that fails to load must leave the run as it was.
        values = self._values()
        state = await values.load(at.manifest)
        wave = self._graph.ready(at.completed, skipped)
        with active(run_id):
            try:
                taken = await self.store.commit(
                    Commit(
                        run_id=run_id,
                        events=[NewEvent(EventType.NODE_STARTED, n) for n in wave],
                        run=taking_over(owner),
                        expect_status=frozenset({run.status}),
                        expect_owner=run.owner,
                    )
                )
            except Conflict as conflict:
                raise AlreadyResumed(
                    f"Run {run_id} changed while resuming it (now {conflict.run.status.value}): "
                    "another process resumed or decided it first."
                ) from None
            return await self._finish(self._runner(values, taken.run, owner, state, at, checkpoint))

    resume = blocking(aresume)

    async def aapprove(
        self,
        run_id: str,
        approved: bool = True,
        *,
        value: Any = None,
        comment: str | None = None,
        by: str | None = None,
        node: str | None = None,
    ) -> Run:
        """Record a decision on the run's gate (atomically, once) and continue the run.

        Args:
            run_id: The paused run.
            approved: False records a rejection (``gate()`` returns ``approved=False``).
            value: Any JSON value handed back with the decision.
            comment: Why, recorded with the decision.
            by: Who decides (default: the user name of this process).
            node: The gate's node, needed only when gates wait at several nodes.

        Returns:
            The run as it stopped after the decision (``completed``, at another gate, or failed).

        Raises:
            AlreadyResumed: Someone else decided first.
            UnknownGate: No gate waits at ``node``.
            WorkflowMismatch: The run is not one of this workflow's.
        """
        self._graph.check()
        await self._own_run(run_id)
        return await self._decide(run_id, make_decision(approved, value, comment, by), node)

    approve = blocking(aapprove)

    async def areject(
        self,
        run_id: str,
        *,
        value: Any = None,
        comment: str | None = None,
        by: str | None = None,
        node: str | None = None,
    ) -> Run:
        """Record a rejection on the run's gate and continue the run; ``gate()`` returns approved=False."""
        return await self.aapprove(run_id, False, value=value, comment=comment, by=by, node=node)

    reject = blocking(areject)

    async def afork(self, run_id: str, checkpoint_id: str | None = None, state: dict[str, Any] | None = None) -> Run:
        """Branch a new run from a checkpoint (default: the latest) with ``state`` overrides, and run it.

        Only the nodes after the checkpoint run; the original run is never touched.

        Args:
            run_id: The run to branch from.
            checkpoint_id: Where to branch (an id from ``dnb.history(run_id).checkpoint_id``).
            state: Values to change, name to value.

        Returns:
            The fork, run until it stopped.

        Raises:
            CheckpointNotFound: The run has no checkpoint with that id.
            InvalidState: ``state`` sets a name starting with ``__`` or is not a dict.
        """
        self._graph.check()
        source = await self._own_run(run_id)
        overrides = check_state(state, "Fork state overrides")
        point = (
            await self.store.get_checkpoint(run_id, checkpoint_id)
            if checkpoint_id
            else await self.store.resume_point(run_id)
        )
        values = self._values()
        loaded: dict[str, Any] = {}
        if point is not None:
            at = await self.store.state_at(run_id, point.seq)
            self._check_fits(source, at.completed)
            # Load before creating: a value that fails to load leaves no half-made fork behind.
            kept = {k: v for k, v in at.manifest.items() if k not in overrides}
            loaded = await values.load(kept)
        owner = this_owner()
        fork = await create_fork(
            self.store, values, run_id, checkpoint_id, overrides, owner=owner, lease_until=lease_deadline()
        )
        forked = await self.store.state_at(fork.run.run_id)
        started = [
            NewEvent(EventType.NODE_STARTED, n) for n in self._graph.ready(forked.completed, fork.checkpoint.skipped)
        ]
        with active(fork.run.run_id):
            state_now = {**loaded, **overrides}
            runner = self._runner(values, fork.run, owner, state_now, forked, fork.checkpoint)
            runner.carry.extend(started)
            return await self._finish(runner)

    fork = blocking(afork)

    async def acancel(self, run_id: str) -> Run:
        """Cancel a run; it keeps its checkpoints and stays resumable."""
        record = await cancel_run(self.store, run_id)
        return await load_run(self.store, run_id, record)

    cancel = blocking(acancel)

    async def astatus(self, run_id: str) -> dict[str, Any]:
        """Return the run's status (node counts, every execution's address); nodes not reached are pending."""
        run = await current_run(self.store, run_id, await self._own_run(run_id))
        return describe(run, await self.store.status_rows(run_id), self._graph.nodes)

    status = blocking(astatus)

    async def aget(self, run_id: str) -> Run:
        """Return a run of this workflow."""
        return await load_run(self.store, run_id, await self._own_run(run_id))

    get = blocking(aget)

    @classmethod
    def _bound_to(cls, flow: Workflow, store: Store) -> Workflow:
        """Return a copy of ``flow`` working on ``store``."""
        copy = cls(flow.name, store=store, sleep=flow._sleep, executor=flow.executor)
        copy._graph = flow._graph
        return copy

    # -- internals ------------------------------------------------------------------------

    def _values(self) -> ValueCodec:
        return ValueCodec(self.store, load_secret())

    async def _own_run(self, run_id: str) -> RunRecord:
        run = await self.store.get_run(run_id)
        if run.name != self.name:
            raise WorkflowMismatch(
                f"Run {run_id} belongs to workflow {run.name!r}, not {self.name!r}; use that "
                "workflow's object, or durable_nb.approve/cancel/fork that need no code."
            )
        return run

    def _check_fits(self, run: RunRecord, completed: list[str]) -> None:
        unknown = self._graph.unknown(completed)
        if unknown:
            raise WorkflowMismatch(
                f"Run {run.run_id} completed nodes {unknown} that workflow {self.name!r} does not "
                "define; resume it with the workflow version that started it."
            )

    async def _decide(self, run_id: str, decision: Any, node: str | None) -> Run:
        owner = this_owner()
        # Load before deciding: a value that fails to load must leave the gate open.
        values = self._values()
        state = await values.load((await self.store.state_at(run_id)).manifest)
        with active(run_id):
            result = await decide(self.store, run_id, decision, node, continue_as=owner, lease_until=lease_deadline())
            if result.run.status is not RunStatus.RUNNING:
                return await load_run(self.store, run_id, result.run)
            at = await self.store.state_at(run_id)
            return await self._finish(self._runner(values, result.run, owner, state, at, result.checkpoints[-1]))

    def _runner(
        self,
        values: ValueCodec,
        run: RunRecord,
        owner: str,
        state: dict[str, Any],
        at: CheckpointState,
        checkpoint: CheckpointRecord | None,
    ) -> Runner:
        return Runner(
            graph=self._graph,
            store=self.store,
            values=values,
            run=run,
            owner=owner,
            state=state,
            log=StateLog(at),
            skipped=list(checkpoint.skipped) if checkpoint else [],
            routes=dict(checkpoint.routes) if checkpoint else {},
            resumes=decisions_of(checkpoint),
            head_checkpoint_id=checkpoint.checkpoint_id if checkpoint else None,
            sleep=self._sleep,
            head_wave_writes=checkpoint.extra.get("wave_writes") if checkpoint else None,
            executor=self.executor,
        )

    async def _finish(self, runner: Runner) -> Run:
        record = await runner.drive()
        if record.status is RunStatus.CANCELLED:
            return await load_run(self.store, record.run_id, record)
        pending = await self.store.pending_interrupts(record.run_id) if record.status is RunStatus.PAUSED else []
        return Run(record, pending=pending, state=runner.state)
