"""Where a workflow run stands while a runner works on it: its state, the completed, skipped and
routed nodes, and the next wave worked out from what changed."""

from __future__ import annotations

from collections.abc import Container
from typing import Any

from ...model import Decision
from ..state.statelog import StateLog
from .graph import Graph

__all__ = ["RunProgress"]


class _Done:
    """Completed or skipped: membership in either, without building their union."""

    def __init__(self, completed: Container[str], skipped: set[str]) -> None:
        self.completed = completed
        self.skipped = skipped

    def __contains__(self, node: object) -> bool:
        return node in self.completed or node in self.skipped


class RunProgress:
    """A run's state and nodes done, as a runner holds them between checkpoints."""

    def __init__(
        self,
        graph: Graph,
        state: dict[str, Any],
        log: StateLog,
        skipped: list[str],
        routes: dict[str, Any],
        resumes: dict[str, list[Decision]],
        wave_writes: dict[str, str] | None,
    ) -> None:
        self.graph = graph
        self.state = state
        # The values' addresses and the completed nodes, with what changed since the last checkpoint.
        self.log = log
        self.manifest = log.manifest
        self.skipped = skipped
        self.routes = routes
        self.resumes = resumes
        # Keys written by the wave in progress, kept in checkpoints so a clash survives a resume.
        self.wave_writes: dict[str, str] = dict(wave_writes or {})
        self._ready: list[str] | None = None
        # Nodes completed or skipped since the wave was last worked out: only their dependents
        # can join it, so the next wave costs what changed, not the size of the graph.
        self.newly_done: list[str] = []

    def ready(self) -> list[str]:
        """Return the next wave."""
        if self._ready is None:
            self._ready = self.graph.ready(self.log.done, self.skipped)
        elif self.newly_done:
            done = _Done(self.log.done, set(self.skipped))
            self._ready = self.graph.ready_after(self._ready, self.log.done, done, self.newly_done)
        self.newly_done = []
        return list(self._ready)

    def branch_key(self, node_id: str | None) -> str | None:
        """Return the route key of the switch branch ``node_id`` runs in, if it runs in one."""
        if node_id not in self.graph.nodes:
            return None
        for dep in self.graph.nodes[node_id].after:
            route = self.routes.get(dep)
            if route is not None and node_id in route["nodes"]:
                return str(route["key"])
        return None

    def draft_fields(self) -> dict[str, Any]:
        """Return what every checkpoint of the run carries: its changes, skipped nodes, routes and decisions."""
        return {
            **self.log.draft_fields(),
            "skipped": list(self.skipped),
            "routes": dict(self.routes),
            "resumes": {k: [d.to_json() for d in v] for k, v in self.resumes.items()} if self.resumes else {},
        }

    def complete(self, node_id: str) -> None:
        """Record that a node completed."""
        self.log.complete(node_id)
        self.newly_done.append(node_id)
