"""LangGraph threads among runs: find a thread's run from a LangGraph config, show its values.

A LangGraph thread stored by ``durable_nb.langgraph.DurableSaver`` is one run per namespace,
named after the thread, whose meta says so under ``"langgraph"``. The views take such a
config (``{"configurable": {"thread_id": …}}``) wherever they take a run; nothing here imports
LangGraph. A config names a thread but not its store: without ``store=``, the thread is looked
for in the stores of the savers made in this process (the latest first), then in the default store.
"""

from __future__ import annotations

import threading
import uuid
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import InvalidInput, RunNotFound
from ..model import RunRecord
from ..store import resolve_store
from ..store.protocol import Store

__all__ = [
    "META",
    "decode_values",
    "find_thread",
    "is_thread_config",
    "register_thread_store",
    "register_value_decoder",
    "thread_address",
    "thread_run",
]

# A run holding a LangGraph thread's namespace says so in its meta under this key.
META = "langgraph"

_USAGE = "pass config={'configurable': {'thread_id': '…'}} as LangGraph does (graph.invoke(input, config))"

# How the values of a kind of run are turned back into objects (LangGraph's serializer stores
# (type, bytes) pairs); registered by the package that wrote them, when it is imported.
_decoders: dict[str, Callable[[Any], Any]] = {}

# The stores savers of this process keep threads in, the latest registered first.
_thread_stores: list[weakref.ref[Store]] = []
_thread_stores_lock = threading.Lock()


def is_thread_config(value: Any) -> bool:
    """Tell whether ``value`` looks like a LangGraph config rather than a run."""
    return isinstance(value, Mapping) and "configurable" in value


def thread_address(config: Any) -> tuple[str, str]:
    """Return (thread id, namespace) of a LangGraph config; raise InvalidInput saying how to call."""
    # A dict, as a rule (every step's calls pass one): told apart without the Mapping ABC's check.
    configurable = config.get("configurable") if type(config) is dict or isinstance(config, Mapping) else None
    if type(configurable) is dict:
        # As every step's calls name a thread: a dict of a text id and namespace, taken as they are.
        thread_id, ns = configurable.get("thread_id"), configurable.get("checkpoint_ns") or ""
        if type(thread_id) is str and thread_id and type(ns) is str:
            return thread_id, ns
    if not (type(configurable) is dict or isinstance(configurable, Mapping)) or configurable.get("thread_id") is None:
        raise InvalidInput(f"A LangGraph thread needs its thread id: {_USAGE}. Got config={config!r}.")
    thread_id = configurable["thread_id"]
    if type(thread_id) is not str and isinstance(thread_id, (int, uuid.UUID)) and not isinstance(thread_id, bool):
        thread_id = str(thread_id)
    if not isinstance(thread_id, str) or not thread_id:
        raise InvalidInput(f"A thread id is non-empty text (or a number or UUID), not {thread_id!r}: {_USAGE}.")
    ns = configurable.get("checkpoint_ns") or ""
    if not isinstance(ns, str):
        raise InvalidInput(f"checkpoint_ns is text ('' for the root graph), not {ns!r}.")
    return thread_id, ns


async def thread_run(store: Store, thread_id: str, checkpoint_ns: str = "") -> RunRecord:
    """Return the run holding a LangGraph thread's namespace; raise RunNotFound when it has none."""
    if not isinstance(thread_id, str) or not thread_id:
        raise InvalidInput(f"A thread id is non-empty text: {_USAGE}; got {thread_id!r}.")
    for run in await store.list_runs(thread_id):
        info = run.meta.get(META)
        if isinstance(info, dict) and info.get("thread_id") == thread_id and info.get("checkpoint_ns") == checkpoint_ns:
            return run
    where = f" (namespace {checkpoint_ns!r})" if checkpoint_ns else ""
    raise RunNotFound(f"langgraph thread {thread_id!r}{where}", store.url)


def register_thread_store(store: Store) -> None:
    """Note a store that keeps LangGraph threads (a saver's): the views look there for a config's thread."""
    with _thread_stores_lock:
        _thread_stores[:] = [weakref.ref(store), *(r for r in _thread_stores if r() not in (None, store))]


def _open_thread_stores() -> list[Store]:
    with _thread_stores_lock:
        found = [r() for r in _thread_stores]
    return [s for s in found if s is not None and not getattr(s, "_closed", False)]


async def find_thread(config: Any, store: Any = None) -> tuple[Store, RunRecord]:
    """Return the store holding the thread a LangGraph config names, and the thread's run.

    With ``store`` None, the thread is looked for in the stores of this process's savers (the
    latest first), then in the default store; RunNotFound names every store looked in.
    """
    thread_id, ns = thread_address(config)
    if store is not None:
        resolved = resolve_store(store)
        return resolved, await thread_run(resolved, thread_id, ns)
    searched: list[Store] = []
    for saver_store in [*_open_thread_stores(), None]:
        # None: the default store, made only when no saver's store holds the thread.
        candidate = resolve_store(None) if saver_store is None else saver_store
        if candidate in searched:
            continue
        searched.append(candidate)
        try:
            return candidate, await thread_run(candidate, thread_id, ns)
        except RunNotFound:
            continue
    where = f" (namespace {ns!r})" if ns else ""
    raise RunNotFound(f"langgraph thread {thread_id!r}{where}", " or ".join(dict.fromkeys(c.url for c in searched)))


def register_value_decoder(kind: str, decode: Callable[[Any], Any]) -> None:
    """Decode the stored values of runs whose meta holds ``kind`` with ``decode`` in the views."""
    _decoders[kind] = decode


def decode_values(run: RunRecord, values: dict[str, Any]) -> dict[str, Any]:
    """Return a run's loaded values as objects (a LangGraph thread's through its serializer)."""
    for kind, decode in _decoders.items():
        if kind in run.meta:
            return {name: decode(value) for name, value in values.items()}
    return values
