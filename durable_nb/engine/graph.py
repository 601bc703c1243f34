"""A workflow's nodes and their dependencies: validation and the next wave."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError

__all__ = ["Graph", "NodeSpec"]


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node function and its execution policy."""

    node_id: str
    fn: Callable[..., Any]
    after: tuple[str, ...]
    retry_count: int
    timeout_seconds: float | None
    label: str

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)


class Graph:
    """Nodes in definition order, each waiting for the nodes named in its ``after``."""

    def __init__(self, workflow_name: str) -> None:
        self.workflow_name = workflow_name
        self.nodes: dict[str, NodeSpec] = {}
        self._checked = False

    def add(self, spec: NodeSpec) -> None:
        """Add a node; a second node with the same id is a configuration error."""
        if spec.node_id in self.nodes:
            raise ConfigurationError(
                f"Workflow {self.workflow_name!r} already has a node {spec.node_id!r}; "
                "give the second one another name with @flow.node(name=...)."
            )
        self.nodes[spec.node_id] = spec
        self._checked = False

    def check(self) -> None:
        """Raise ConfigurationError for unknown dependencies and cycles."""
        if self._checked:
            return
        for spec in self.nodes.values():
            unknown = [dep for dep in spec.after if dep not in self.nodes]
            if unknown:
                raise ConfigurationError(
                    f"Node {spec.node_id!r} of workflow {self.workflow_name!r} runs after "
                    f"{unknown}, which the workflow does not define. Known nodes: {list(self.nodes)}."
                )
        done: set[str] = set()
        while len(done) < len(self.nodes):
            wave = [n for n, s in self.nodes.items() if n not in done and set(s.after) <= done]
            if not wave:
                stuck = sorted(set(self.nodes) - done)
                raise ConfigurationError(
                    f"Workflow {self.workflow_name!r} has a dependency cycle among {stuck}; "
                    "remove one of their after= links."
                )
            done.update(wave)
        self._checked = True

    def ready(self, completed: Iterable[str]) -> list[str]:
        """Return the nodes not yet completed whose dependencies all are, in definition order."""
        done = set(completed)
        return [n for n, s in self.nodes.items() if n not in done and all(d in done for d in s.after)]

    def unknown(self, names: Iterable[str]) -> list[str]:
        """Return the names that are not nodes of this graph."""
        return [n for n in names if n not in self.nodes]
