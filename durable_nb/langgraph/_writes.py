"""Pending writes and gates: a task's writes stored under the checkpoint they belong to.

A task that stopped at ``interrupt()`` opens a gate of its thread's run; a resume
(``Command(resume=…)``) claims the gate it answers in the same transaction as its write, so of
concurrent resumers exactly one is stored and the others get AlreadyResumed. Within one graph
invocation, writes that follow a resume wait for its claim, and refuse to go on from one it lost.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
from collections.abc import Coroutine, Sequence
from contextvars import ContextVar
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT, RESUME

from .._loop import loop_running
from ..errors import AlreadyResumed, InvalidInput, RunNotFound
from ..model import Commit, EventType, NewEvent, PendingInterrupt, RunStatus, RunUpdate
from ..store.protocol import Store
from ..store.rules import ANY_NODE
from ._gates import gate_node, gate_of
from ._runs import ThreadRuns
from ._shape import address, checkpoint_id_of, our_id
from ._values import ChannelValues

__all__ = ["PendingWrites", "after_claim", "begin_invocation", "claim_pending"]

# LangGraph's task id for writes of the graph's input, such as Command(resume=…).
_INPUT_TASK = "00000000-0000-0000-0000-000000000000"
# Writes that open or claim a gate, or change the run's status: not stored by put_now.
_NOT_PLAIN = frozenset({INTERRUPT, RESUME, ERROR})


@dataclasses.dataclass
class _Invocation:
    """What a saver learns during one graph invocation: the interrupts whose resume it lost.

    LangGraph stores writes from background threads (or tasks), each in a copy of the context
    of the invocation that loaded the thread with get_tuple(): they share this object.
    """

    # Keyed by (thread id, namespace, checkpoint id): the resumes in flight, and those lost.
    claims: dict[tuple[str, str, str], concurrent.futures.Future[None]] = dataclasses.field(default_factory=dict)
    lost: dict[tuple[str, str, str], AlreadyResumed] = dataclasses.field(default_factory=dict)


_invocation: ContextVar[_Invocation | None] = ContextVar("durable_nb_langgraph_invocation", default=None)


def begin_invocation() -> None:
    """Start a graph invocation in the caller's context (LangGraph loads the thread first)."""
    _invocation.set(_Invocation())


def claim_pending(key: tuple[str, str, str]) -> bool:
    """Tell whether this invocation made a resume at a checkpoint (won, lost or in flight)."""
    invocation = _invocation.get()
    return invocation is not None and (key in invocation.claims or key in invocation.lost)


def after_claim(key: tuple[str, str, str]) -> Coroutine[Any, Any, None] | None:
    """Return what waits for this invocation's resume at a checkpoint, if one was made there (None:
    nothing to wait for); it refuses to go on from a resume it lost: the winner's run goes on."""
    # Not a coroutine function: a step with no resume (nearly every one) awaits nothing.
    invocation = _invocation.get()
    if invocation is None or (key not in invocation.claims and key not in invocation.lost):
        return None
    return _after_claim(invocation, key)


async def _after_claim(invocation: _Invocation, key: tuple[str, str, str]) -> None:
    claim = invocation.claims.get(key)
    if claim is not None and not claim.done():
        try:
            await asyncio.wrap_future(claim)
        except Exception:  # noqa: BLE001 - the resume's own caller reports how it failed
            pass
    lost = invocation.lost.get(key)
    if lost is not None:
        raise AlreadyResumed(str(lost))


def _claim_started(
    config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str
) -> concurrent.futures.Future[None] | None:
    """Note a resume of this invocation as in flight (its later writes wait for it); return its future."""
    invocation = _invocation.get()
    if invocation is None or task_id != _INPUT_TASK or not any(w[0] == RESUME for w in writes):
        return None
    try:
        key = (*address(config), checkpoint_id_of(config) or "")
    except InvalidInput:
        return None  # refused when the writes are stored
    claim: concurrent.futures.Future[None] = concurrent.futures.Future()
    invocation.claims[key] = claim
    return claim


def _status_of(writes: Sequence[tuple[str, Any]], channels: set[str]) -> RunUpdate | None:
    """A thread that stopped at an interrupt is paused, one whose task failed is failed, as the run shows."""
    if INTERRUPT in channels:
        return RunUpdate(status=RunStatus.PAUSED)
    if ERROR in channels:
        error = dict(writes)[ERROR]  # the last one, as a dict of the writes keeps it
        return RunUpdate(status=RunStatus.FAILED, error=str(error), error_type=type(error).__name__)
    return None


async def _settling(claim: concurrent.futures.Future[None] | None, storing: Coroutine[Any, Any, None]) -> None:
    """Store, then settle the claim of the resume being stored (if it is one) as the store went."""
    try:
        await storing
    except BaseException as error:
        if claim is not None:
            claim.set_exception(error)
        raise
    if claim is not None:
        claim.set_result(None)


class PendingWrites:
    """Store tasks' writes with their thread's run, opening and claiming its gates as they say."""

    def __init__(self, store: Store, runs: ThreadRuns, values: ChannelValues) -> None:
        self.store = store
        self._runs = runs
        self._values = values

    def put(
        self,
        serde: SerializerProtocol,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Coroutine[Any, Any, None]:
        """Return the coroutine that stores a task's writes; a resume is in flight from this call on."""
        # Not a coroutine function: LangGraph calls it before the invocation's tasks run, so a
        # resume is known to be in flight from then on (its own later writes wait for it).
        claim = _claim_started(config, writes, task_id)
        if claim is None:
            return self._store(serde, config, writes, task_id, task_path, False)
        return _settling(claim, self._store(serde, config, writes, task_id, task_path, True))

    def put_now(
        self,
        serde: SerializerProtocol,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> bool:
        """Store a task's plain writes (no interrupt, resume or error) in one blocking store call if
        the thread's run is remembered and no loop runs in this thread; tell whether it did (else
        ``put`` stores them)."""
        commit_now = getattr(self.store, "commit_now", None)
        if commit_now is None or loop_running():
            return False
        for channel, _ in writes:  # a loop, not a set: a task writes a channel or two
            if channel in _NOT_PLAIN:
                return False
        thread_id, ns = address(config)
        checkpoint_id = checkpoint_id_of(config)
        run_id = self._runs.known(thread_id, ns)
        if run_id is None or checkpoint_id is None or type(task_id) is not str or not task_id:
            return False  # put opens the run, or says what is wrong with the call
        if claim_pending((thread_id, ns, checkpoint_id)):
            return False
        rows, blobs = self._values.writes(serde, checkpoint_id, writes, task_id, task_path)
        if not rows:
            return True
        seen = self._runs.row(run_id)
        try:
            # The saver's own path: writes alone leave the run row as it is (nothing to remember).
            store_writes_now = getattr(self.store, "store_writes_now", None)
            if seen is not None and store_writes_now is not None and store_writes_now(run_id, rows, blobs):
                return True
            result = commit_now(Commit(run_id, blobs=blobs, writes=rows, seen=seen))
        except RunNotFound:
            self._runs.forget([run_id])
            return False
        if result is None:
            return False
        self._runs.committed(result.run)
        return True

    async def _store(
        self,
        serde: SerializerProtocol,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
        claims: bool,
    ) -> None:
        thread_id, ns = address(config)
        checkpoint_id = checkpoint_id_of(config)
        if checkpoint_id is None:
            raise InvalidInput(
                "put_writes() takes the config of a stored checkpoint (with its checkpoint_id), as put() returns it."
            )
        if not isinstance(task_id, str) or not task_id:
            raise InvalidInput(f"task_id is the non-empty text id of the task that wrote, not {task_id!r}.")
        rows, blobs = self._values.writes(serde, checkpoint_id, writes, task_id, task_path)
        if not rows:
            return
        channels = {channel for channel, _ in writes}
        update = _status_of(writes, channels)
        if not claims and (waiting := after_claim((thread_id, ns, checkpoint_id))) is not None:
            await waiting
        gated = INTERRUPT in channels or RESUME in channels
        for _ in range(2):
            run_id = self._runs.known(thread_id, ns) or await self._runs.open(thread_id, ns)
            if update is not None:
                # Before the commit: a checkpoint stored meanwhile by another thread must see it.
                self._runs.stopped(run_id, checkpoint_id)
            gates = await self._gates(run_id, checkpoint_id, channels, writes, task_id, task_path) if gated else {}
            try:
                result = await self.store.commit(
                    Commit(
                        run_id,
                        blobs=blobs,
                        writes=rows,
                        run=update,
                        seen=self._runs.row(run_id),
                        **gates,
                    )
                )
            except RunNotFound:
                self._runs.forget([run_id])
                continue
            except AlreadyResumed:
                lost = AlreadyResumed(
                    f"The interrupt of thread {thread_id!r} at checkpoint {checkpoint_id} was already resumed "
                    "(by another process, at a gate panel or with durable_nb.approve), or the thread is not "
                    "waiting there; this resume was not stored. See where the thread is with "
                    "graph.get_state(config)."
                )
                invocation = _invocation.get()
                if invocation is not None:
                    invocation.lost[thread_id, ns, checkpoint_id] = lost
                raise lost from None
            self._runs.committed(result.run)
            return

    async def _gates(
        self,
        run_id: str,
        checkpoint_id: str,
        channels: set[str],
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> dict[str, Any]:
        """Return what a commit of writes does to the run's gates: a task that stopped at
        interrupt() opens one; a resume claims the one it answers, in the same transaction."""
        gate_id = our_id(checkpoint_id, run_id)
        pending = await self.store.pending_interrupts(run_id)
        here = [p for p in pending if p.checkpoint_id == gate_id]
        if INTERRUPT in channels:
            node = gate_node(task_path, task_id)
            if any(p.node_id == node for p in here):
                return {}  # the same interrupt stored again
            gate = gate_of(run_id, gate_id, node, dict(writes)[INTERRUPT])
            events = [
                NewEvent(EventType.GATE_OPENED, node, {"reason": gate.reason}),
                NewEvent(EventType.RUN_PAUSED, node),
            ]
            kept: list[PendingInterrupt] = [p for p in here if p.node_id != node]
            # Gates left open at checkpoints the thread has left (a replay from an earlier one) close.
            stale = len(here) != len(pending)
            return {"open_interrupts": [*kept, gate], "release_interrupts": stale, "events": events}
        if task_id != _INPUT_TASK:
            # A task's own resume write, stored once it ran: the resume that let it run was the
            # claim (a resume by map, which LangGraph stores no input write for, closes the gate
            # when the step's checkpoint is stored).
            return {}
        # Command(resume=…): the graph's input answers the interrupt the thread waits at.
        node = here[0].node_id if len(here) == 1 else ANY_NODE
        return {
            "claim": node,
            "claim_gate": gate_id,
            "status_after_claim": RunStatus.PENDING,
            "events": [NewEvent(EventType.GATE_DECIDED, None if node == ANY_NODE else node, {"resumed": True})],
        }
