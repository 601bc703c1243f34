"""ipywidgets front ends: the gate panel (for cells and for LangGraph threads) and the fork inspector."""

from .graph_gates import graph_gate_panel

__all__ = ["graph_gate_panel"]
