"""Deciding a LangGraph interrupt as a durable_nb gate, then resuming the graph with the decision."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig

from .._loop import run_sync
from ..engine.gates.decisions import decide, make_decision
from ..errors import InvalidInput
from ..store.protocol import Store
from ..views.threads import thread_run
from ._shape import address

__all__ = ["aresume", "resume"]


def _store_of(graph: Any) -> Store:
    store = getattr(getattr(graph, "checkpointer", None), "store", None)
    if not isinstance(store, Store):
        raise InvalidInput(
            "resume() takes a graph compiled with a DurableSaver: "
            "builder.compile(checkpointer=DurableSaver.from_url(...)); this graph has "
            f"checkpointer={getattr(graph, 'checkpointer', None)!r}."
        )
    return store


async def _decide(
    graph: Any,
    config: RunnableConfig,
    approved: bool,
    *,
    value: Any = None,
    comment: str | None = None,
    by: str | None = None,
    node: str | None = None,
) -> None:
    if not isinstance(config, Mapping):
        raise InvalidInput(
            f"resume() takes the graph's config, e.g. {{'configurable': {{'thread_id': …}}}}, not {config!r}."
        )
    store = _store_of(graph)
    run = await thread_run(store, *address(config))
    await decide(store, run.run_id, make_decision(approved, value, comment, by), node)


def resume(
    graph: Any,
    config: RunnableConfig,
    approved: bool = True,
    *,
    value: Any = None,
    comment: str | None = None,
    by: str | None = None,
    node: str | None = None,
) -> Any:
    """Decide the interrupt a thread waits at, then resume the graph; return what invoke() returns.

    The decision is claimed atomically before the graph runs: of concurrent resumers exactly one
    goes on, the others get AlreadyResumed and run nothing. ``interrupt()`` returns the decision
    as a dict: ``{"approved", "value", "comment", "by", "at"}``. ``node`` names the interrupted
    node when several wait.
    """
    run_sync(_decide(graph, config, approved, value=value, comment=comment, by=by, node=node))
    return graph.invoke(None, config)


async def aresume(graph: Any, config: RunnableConfig, approved: bool = True, **fields: Any) -> Any:
    """Decide the interrupt a thread waits at, then resume the graph with ``ainvoke``; the
    arguments are ``resume``'s (value, comment, by, node)."""
    await _decide(graph, config, approved, **fields)
    return await graph.ainvoke(None, config)
