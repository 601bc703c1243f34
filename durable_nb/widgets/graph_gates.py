"""The gate panel for a LangGraph thread stopped at ``interrupt()``.

Approve / Reject record the decision through the engine's one decision call (claimed
atomically, exactly once), then resume the graph in this kernel: ``interrupt()`` returns the
decision as a dict (approved, value, comment, by, at). Nothing here imports LangGraph: the
graph is driven through its own ``invoke``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ipywidgets as widgets

from .._loop import run_sync
from ..errors import DurableError, InvalidInput
from ..model import CommitResult
from ..store.protocol import Store
from ..views.threads import thread_address, thread_run
from .gate_panel import GatePanel

__all__ = ["GraphLink", "graph_gate_panel"]


class GraphLink:
    """What continues a LangGraph thread once its gate is decided: the graph, resumed here."""

    def __init__(self, graph: Any, config: Mapping[str, Any], run_id: str) -> None:
        self.graph = graph
        self.config = config
        self.run_id = run_id
        self.result: Any = None

    @property
    def attached_run_id(self) -> str | None:
        """The thread's run."""
        return self.run_id

    def owner_for(self, run_id: str) -> str | None:
        """None: the saver takes the thread's run when the graph resumes, not at the decision."""
        return None

    def continue_after(self, decided: CommitResult) -> str:
        """Resume the graph with the recorded decision; return a note for the person."""
        self.result = self.graph.invoke(None, self.config)
        if isinstance(self.result, Mapping) and self.result.get("__interrupt__"):
            return "The graph went on and stopped at another interrupt(): show graph_gate_panel(graph, config) again."
        return "The graph went on and finished; its result is panel.link.result."

    def switch_to(self, run_id: str) -> None:
        """A kernel is not attached to a LangGraph thread: the graph's config names it."""
        raise DurableError("A LangGraph thread goes on through its graph: pass the thread's config to the graph.")


def graph_gate_panel(graph: Any, config: Mapping[str, Any]) -> widgets.Widget:
    """Show Approve / Reject for the interrupt a LangGraph thread waits at (one panel per waiting task).

    ``graph`` is compiled with ``checkpointer=DurableSaver(...)``; ``config`` is the one given to
    ``graph.invoke``. A click decides the gate and resumes the graph in this kernel.
    """
    store = getattr(getattr(graph, "checkpointer", None), "store", None)
    if not isinstance(store, Store):
        raise InvalidInput(
            "graph_gate_panel() takes a graph compiled with checkpointer=DurableSaver(...), and its config; "
            f"this graph's checkpointer is {getattr(graph, 'checkpointer', None)!r}."
        )
    if not isinstance(config, Mapping):
        raise InvalidInput(
            f"graph_gate_panel() takes the graph's config, {{'configurable': {{'thread_id': …}}}}, not {config!r}."
        )
    run = run_sync(thread_run(store, *thread_address(config)))
    waiting = run_sync(store.pending_interrupts(run.run_id))
    if not waiting:
        return widgets.HTML(
            f"Thread <code>{run.name}</code> waits at no interrupt (its run is {run.status.value}); nothing to decide."
        )
    link = GraphLink(graph, config, run.run_id)
    shared = {"run_id": run.run_id, "link": link}
    panels = [
        GatePanel(store, node_id=g.node_id, reason=g.reason, context=g.context, gate=g.checkpoint_id, **shared)
        for g in waiting
    ]
    return panels[0] if len(panels) == 1 else widgets.VBox(panels)
