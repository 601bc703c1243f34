"""Calling a node function: its scope, a hard timeout per attempt, retries with backoff."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import queue
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from .._loop import owns_running_loop
from ..errors import InvalidState
from ..model import Decision, NewEvent
from .gates import Suspend
from .graph import NodeSpec
from .policy import Attempts
from .scope import NodeScope, enter_scope
from .values import check_state

__all__ = ["Attempter", "Outcome"]

Sleep = Callable[[float], Awaitable[Any]]


class _NodeThreads:
    """Daemon threads for sync node functions, started on demand and retired when idle.

    A timed-out or cancelled sync node cannot be stopped, only abandoned: it must neither
    starve the nodes still to run (so a busy pool grows) nor keep the process from exiting
    (so the threads are daemons, unlike ThreadPoolExecutor's).
    """

    IDLE_SECONDS = 60.0

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = queue.SimpleQueue()
        self._idle = 0
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1
        self._jobs.put((future, fn, args))
        if spawn:
            threading.Thread(target=self._work, name="durable-node", daemon=True).start()
        return future

    def _work(self) -> None:
        while True:
            try:
                future, fn, args = self._jobs.get(timeout=self.IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0:
                        self._idle -= 1
                        return
                continue
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as error:  # noqa: BLE001 - handed to the awaiting runner
                    future.set_exception(error)
            with self._lock:
                self._idle += 1


_NODE_THREADS = _NodeThreads()

# How long the loop thread of the sync API waits for a lone sync node before it goes back to
# its loop: a short node is then collected without the loop's wake-up round trip, and a long
# one delays the lease renewal and cancel checks by no more than this.
SHORT_NODE_SECONDS = 0.005


@dataclass(slots=True)
class Outcome:
    """How one node (or one map item) ended: updates, an error or a pause."""

    node_id: str
    updates: dict[str, Any] | None = None
    error: BaseException | None = None
    suspend: Suspend | None = None
    duration: float = 0.0
    attempts: int = 1
    value: Any = None
    # Updates already stored (a map's results): name to address, and the blobs to commit with it.
    stored: dict[str, tuple[str, list[Any]]] = field(default_factory=dict)


class Attempter:
    """Runs node functions for one run, reporting retries as events to ride the next commit."""

    def __init__(self, run_id: str, store: Any, secret: bytes, sleep: Sleep, events: list[NewEvent]) -> None:
        self.run_id = run_id
        self.store = store
        self.secret = secret
        self.sleep = sleep
        self.events = events
        # Where agents in the nodes write their checkpoints (set by the runner that drives them).
        self.steps: Any = None

    async def _call(self, spec: NodeSpec, args: tuple[Any, ...], scope: NodeScope, alone: bool) -> Any:
        context = contextvars.copy_context()
        context.run(enter_scope, scope)
        loop = asyncio.get_running_loop()
        call: Awaitable[Any]
        if spec.is_async:
            call = loop.create_task(spec.fn(*args), context=context)
        else:
            future = _NODE_THREADS.submit(context.run, spec.fn, *args)
            if alone and spec.timeout_seconds is None and owns_running_loop():
                try:
                    return future.result(timeout=SHORT_NODE_SECONDS)
                except concurrent.futures.TimeoutError:
                    pass
            call = asyncio.wrap_future(future, loop=loop)
        if spec.timeout_seconds is None:
            return await call
        try:
            return await asyncio.wait_for(call, spec.timeout_seconds)
        except TimeoutError:
            raise spec.policy.timed_out(spec.label, spec.node_id) from None

    async def run(
        self,
        spec: NodeSpec,
        args: tuple[Any, ...],
        decisions: list[Decision],
        *,
        expect_dict: bool = True,
        item_index: int | None = None,
        alone: bool = False,
    ) -> Outcome:
        """Run attempts of one node until one succeeds, pauses, or the retries are spent."""
        started = time.perf_counter()
        attempts = Attempts(spec.policy, spec.node_id, self.events, item_index)
        for attempt in attempts:
            scope = NodeScope(
                run_id=self.run_id,
                node_id=spec.node_id,
                store=self.store,
                secret=self.secret,
                decisions=list(decisions),
                steps=self.steps,
                item_index=item_index,
            )
            try:
                result = await self._call(spec, args, scope, alone)
            except Suspend as suspend:
                return Outcome(spec.node_id, suspend=suspend, duration=time.perf_counter() - started, attempts=attempt)
            except Exception as error:  # noqa: BLE001 - a node's failure is data, recorded in its checkpoint
                wait = attempts.failed(error)
                if wait is not None:
                    await self.sleep(wait)
                    continue
                return Outcome(spec.node_id, error=error, duration=time.perf_counter() - started, attempts=attempt)
            elapsed = time.perf_counter() - started
            if not expect_dict:
                return Outcome(spec.node_id, value=result, duration=elapsed, attempts=attempt)
            try:
                updates = check_state(result, f"The result of node '{spec.label}'", from_node=True)
            except InvalidState as error:
                return Outcome(spec.node_id, error=error, duration=elapsed, attempts=attempt)
            return Outcome(spec.node_id, updates=updates, duration=elapsed, attempts=attempt)
        raise AssertionError("unreachable")
