"""Workflows: their definition and graph, and the runner that drives a run through waves of
nodes, switches and maps, one commit per finished node, until it ends, fails or pauses."""
