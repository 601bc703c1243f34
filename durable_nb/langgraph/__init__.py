"""LangGraph on durable_nb's store: ``DurableSaver``, a LangGraph checkpointer.

    from durable_nb.langgraph import DurableSaver
    graph = builder.compile(checkpointer=DurableSaver.from_url("sqlite:///runs.db"))

Needs the ``langgraph`` extra: ``pip install 'durable-nb[langgraph]'``.
"""

from __future__ import annotations

try:
    import langgraph.checkpoint.base  # noqa: F401
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError("durable_nb.langgraph needs LangGraph: pip install 'durable-nb[langgraph]'.") from error

from ._saver import DurableSaver

__all__ = ["DurableSaver"]
