"""LangGraph on durable_nb's store: ``DurableSaver``, a LangGraph checkpointer.

    from durable_nb.langgraph import DurableSaver
    graph = builder.compile(checkpointer=DurableSaver.from_url("sqlite:///runs.db"))

A thread is a durable_nb run (``saver.run_id(thread_id)``; the views also take the graph's
config). A task stopped at ``interrupt()`` is a gate: ``resume(graph, config, approved=True)``
decides it and resumes the graph, and in a notebook
``durable_nb.widgets.graph_gate_panel(graph, config)`` shows Approve / Reject for it.

Needs the ``langgraph`` extra: ``pip install 'durable-nb[langgraph]'``.
"""

from __future__ import annotations

try:
    import langgraph.checkpoint.base  # noqa: F401
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError("durable_nb.langgraph needs LangGraph: pip install 'durable-nb[langgraph]'.") from error

from ._resume import aresume, resume
from ._saver import DurableSaver

__all__ = ["DurableSaver", "aresume", "resume"]
