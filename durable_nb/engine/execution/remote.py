"""The worker side of a node or map item sent to an executor: unpack the call, run it, pack the outcome.

What travels is bytes made by cloudpickle, both ways, so any executor can carry it (a process
pool pickles only what it can import; cloudpickle also carries notebook functions and
lambdas). The part shared by every item of a map (the function and the state it sees) is
unpacked once per worker process, not once per item.

A worker never touches the store: ``@idempotent`` calls read the results the owner shipped with
the item, and the results of new calls travel back in the outcome for the owner to commit.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import os
import pickle
import socket
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from ...model import Decision
from ..gates.gate import Suspend
from .scope import NodeScope, enter_scope

__all__ = [
    "ItemPart",
    "RemoteCalls",
    "RemoteFailure",
    "RemoteOutcome",
    "SharedPart",
    "pack",
    "pack_call",
    "rebuild_suspend",
    "run_remote",
    "unpack",
    "unpack_call",
]

_PROTOCOL = pickle.HIGHEST_PROTOCOL


def pack(value: Any) -> bytes:
    """Serialize a call or an outcome for the trip to or from a worker."""
    return cloudpickle.dumps(value, protocol=_PROTOCOL)


# Types whose values plain pickle writes by value: an item made only of them needs no cloudpickle.
_PLAIN = frozenset({int, float, str, bytes, bool, type(None)})
_PLAIN_SIZE = 64  # the most elements of a list, tuple or dict looked through


def _plain(value: Any, depth: int = 2) -> bool:
    kind = type(value)
    if kind in _PLAIN:
        return True
    if depth == 0 or kind not in (list, tuple, dict) or len(value) > _PLAIN_SIZE:
        return False
    if kind is dict:
        return all(type(k) in _PLAIN and _plain(v, depth - 1) for k, v in value.items())
    return all(_plain(v, depth - 1) for v in value)


def pack_call(part: ItemPart) -> bytes:
    """Serialize one call's own part: plain data (numbers, text, shallow lists and dicts of them) by
    pickle, three times faster than cloudpickle, which any other value needs (a notebook's class
    would reach the worker by a name it cannot import)."""
    if not part.decisions and not part.known and all(_plain(a) for a in part.args):
        # As a tuple: the class's module and name would be most of a small item's bytes (123 for
        # an int, against 20), sent with every item to the scheduler and on to a worker.
        return pickle.dumps((part.args, part.item_index), protocol=_PROTOCOL)
    return pack(part)


def unpack_call(data: bytes) -> ItemPart:
    """Read what ``pack_call`` wrote."""
    part = pickle.loads(data)
    return ItemPart(*part) if type(part) is tuple else part


def unpack(data: bytes) -> Any:
    """Read what ``pack`` wrote."""
    return pickle.loads(data)


@dataclass(slots=True)
class SharedPart:
    """What every call of one node (or every item of one map) has in common."""

    fn: Callable[..., Any]
    run_id: str
    node_id: str
    label: str
    # Arguments before the item's own: (state,) for a workflow map, () for a cell's map.
    leading: tuple[Any, ...] = ()


@dataclass(slots=True)
class ItemPart:
    """What one call adds: its own arguments, decisions, and the @idempotent results it may reuse."""

    args: tuple[Any, ...]
    item_index: int | None
    decisions: list[Decision] = field(default_factory=list)
    known: dict[str, Any] = field(default_factory=dict)


class RemoteCalls:
    """@idempotent on a worker: results shipped by the owner, new ones kept for the owner to commit."""

    def __init__(self, known: dict[str, Any]) -> None:
        self.known = dict(known)
        self.new: dict[str, Any] = {}

    def lookup(self, digest: str) -> tuple[bool, Any]:
        """Return whether the call ``digest`` has a result already, and that result."""
        if digest in self.new:
            return True, self.new[digest]
        if digest in self.known:
            return True, self.known[digest]
        return False, None

    def remember(self, digest: str, value: Any) -> None:
        """Keep a new call's result for the outcome."""
        self.new[digest] = value


class RemoteFailure(Exception):
    """An error raised on a worker that could not itself travel back: its type's name, message and traceback."""

    def __init__(self, error_type: str, message: str, traceback: str) -> None:
        super().__init__(error_type, message, traceback)
        # Read by the run's failure record: the worker's error type and traceback, not this wrapper's.
        self.error_type = error_type
        self.message = message
        self.traceback = traceback

    def __reduce__(self) -> tuple[Any, ...]:
        # Explicit, so that libraries changing how exceptions pickle (Dask installs tblib's) keep the fields.
        return (RemoteFailure, (self.error_type, self.message, self.traceback))

    def __str__(self) -> str:
        return f"{self.error_type}: {self.message}"


@dataclass(slots=True)
class RemoteOutcome:
    """How a call ended on its worker: a value, an error or a gate, and its new @idempotent results."""

    value: Any = None
    error: BaseException | None = None
    # A gate's pause, as Suspend's constructor arguments (Suspend itself does not pickle).
    suspend: dict[str, Any] | None = None
    calls: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    worker: str = ""


# Shared parts unpacked on this worker process, by the token the owner gave them; a map's items
# arrive together, so a handful is plenty.
_SHARED: OrderedDict[str, SharedPart] = OrderedDict()
_SHARED_LIMIT = 8
_SHARED_LOCK = threading.Lock()


def _shared(token: str, data: bytes) -> SharedPart:
    with _SHARED_LOCK:
        found = _SHARED.get(token)
        if found is not None:
            _SHARED.move_to_end(token)
            return found
    part: SharedPart = unpack(data)
    with _SHARED_LOCK:
        _SHARED[token] = part
        while len(_SHARED) > _SHARED_LIMIT:
            _SHARED.popitem(last=False)
    return part


_WHERE: list[Any] = [None, ""]  # this process's id and its name for errors, asked once per process


def _where() -> str:
    pid = os.getpid()
    if _WHERE[0] != pid:
        _WHERE[:] = [pid, f"{socket.gethostname()} pid {pid}"]
    return _WHERE[1]


def run_remote(token: str, shared: bytes, item: bytes) -> bytes:
    """Run one call on this worker and return its packed outcome (the entry point executors call)."""
    started = time.perf_counter()
    part = _shared(token, shared)
    own = unpack_call(item)
    calls = RemoteCalls(own.known)
    scope = NodeScope(
        run_id=part.run_id,
        node_id=part.node_id,
        store=None,  # type: ignore[arg-type]  # a worker has no store: see RemoteCalls
        secret=b"",
        decisions=list(own.decisions),
        item_index=own.item_index,
        remote=calls,
    )
    context = contextvars.copy_context()
    context.run(enter_scope, scope)
    outcome = RemoteOutcome(worker=_where())
    try:
        result = context.run(part.fn, *part.leading, *own.args)
        if inspect.iscoroutine(result):
            result = context.run(asyncio.run, result)
        outcome.value = result
    except Suspend as pause:
        outcome.suspend = {
            "reason": pause.reason,
            "context": pause.context,
            "timeout_seconds": pause.timeout_seconds,
            "on_timeout": pause.on_timeout,
            "kind": pause.kind,
            "agent_path": pause.agent_path,
        }
    except Exception as error:  # noqa: BLE001 - handed back to the owner, which applies the retry policy
        outcome.error = _travelling(error, outcome.worker, part.label)
    if outcome.error is None and outcome.suspend is None and not calls.new and _plain(outcome.value):
        # Most items return plain data and nothing else: a tuple of it, by pickle (three times
        # faster than cloudpickle, and without the outcome's class name). See read_outcome.
        return pickle.dumps((outcome.value,), protocol=_PROTOCOL)
    outcome.calls = calls.new
    outcome.seconds = time.perf_counter() - started
    return _pack_outcome(outcome)


def _travelling(error: Exception, worker: str, label: str) -> Exception:
    """Return ``error`` as it can reach the owner: with a note naming the worker and its traceback there,
    or as a RemoteFailure when it would not come back whole (it does not pickle, or not rebuild)."""
    frames = traceback.format_tb(error.__traceback__)[1:]  # without run_remote's own frame
    where = f"(raised on worker {worker} in '{label}')"
    trace = "".join(["Traceback on the worker (most recent call last):\n", *frames])
    try:
        error.add_note(f"{where}\n{trace}".rstrip())
        unpack(pack(error))
        return error
    except Exception:  # noqa: BLE001 - any failure to travel is reported as the worker's error, by name
        full = "".join(traceback.format_exception(error))
        return RemoteFailure(type(error).__name__, f"{error} {where}", full)


def _pack_outcome(outcome: RemoteOutcome) -> bytes:
    try:
        return pack(outcome)
    except Exception as failure:  # noqa: BLE001 - a result or error that cannot travel fails the call, not the worker
        error = outcome.error
        if error is not None and not isinstance(error, RemoteFailure):
            trace = "".join(traceback.format_exception(error))
            outcome.error = RemoteFailure(type(error).__name__, str(error), trace)
        elif error is None:
            outcome.value = None
            outcome.error = RemoteFailure(
                type(failure).__name__,
                f"the result could not be sent back from the worker ({failure}); return plain data "
                "(numbers, text, lists, dicts, DataFrames) from functions run on an executor",
                "",
            )
        try:
            return pack(outcome)
        except Exception:  # noqa: BLE001 - the @idempotent results themselves would not pickle
            outcome.calls = {}
            return pack(outcome)


def rebuild_suspend(detail: dict[str, Any]) -> Suspend:
    """Return the pause a worker's gate asked for, raised again at the owner."""
    return Suspend(**detail)
