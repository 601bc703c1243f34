"""ipywidgets front ends: the gate panel (and, later, the fork inspector)."""
