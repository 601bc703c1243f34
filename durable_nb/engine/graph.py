"""A workflow's nodes and their dependencies: validation, the next wave, skipped branches."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigurationError

__all__ = ["KINDS", "Graph", "NodeSpec"]

KINDS = ("node", "loop", "switch", "map")


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node function, its kind and its execution policy."""

    node_id: str
    fn: Callable[..., Any]
    after: tuple[str, ...]
    retry_count: int
    timeout_seconds: float | None
    label: str
    kind: str = "node"
    writes: tuple[str, ...] = ()
    condition: Callable[[dict[str, Any]], Any] | None = None
    max_iterations: int = 5
    items: str | Callable[[dict[str, Any]], Any] | None = None
    into: str | None = None
    max_concurrency: int = 8
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    @property
    def loop_key(self) -> str:
        """The state key holding a loop's iteration counter."""
        return f"__loop_{self.node_id}"

    def item_key(self, index: int) -> str:
        """The state key holding one finished item of a map node."""
        return f"__map_{self.node_id}/{index}"


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
                "give the second one another name with name=..."
            )
        self.nodes[spec.node_id] = spec
        self._checked = False

    def dependents(self, node_id: str) -> list[str]:
        """Return the nodes that name ``node_id`` in their ``after``."""
        return [n for n, s in self.nodes.items() if node_id in s.after]

    def check(self) -> None:
        """Raise ConfigurationError for unknown dependencies, cycles and wave write clashes."""
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
        self._check_writes()
        self._checked = True

    def _ancestors(self) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}

        def visit(node_id: str) -> set[str]:
            if node_id not in found:
                found[node_id] = set()
                for dep in self.nodes[node_id].after:
                    found[node_id] |= {dep} | visit(dep)
            return found[node_id]

        for node_id in self.nodes:
            visit(node_id)
        return found

    def _check_writes(self) -> None:
        # Two nodes that can share a wave (neither runs after the other) may not declare one key.
        declared = [s for s in self.nodes.values() if s.writes]
        if len(declared) < 2:
            return
        ancestors = self._ancestors()
        for i, first in enumerate(declared):
            for second in declared[i + 1 :]:
                ordered = first.node_id in ancestors[second.node_id] or second.node_id in ancestors[first.node_id]
                shared = sorted(set(first.writes) & set(second.writes))
                if shared and not ordered:
                    raise ConfigurationError(
                        f"Nodes {first.node_id!r} and {second.node_id!r} can run in one wave and both "
                        f"write {shared}; make one run after the other or write different keys."
                    )

    def ready(self, completed: Iterable[str], skipped: Iterable[str] = ()) -> list[str]:
        """Return the nodes whose dependencies are all done, at least one of them completed."""
        done_ok = set(completed)
        done = done_ok.union(skipped)
        found = []
        for node_id, spec in self.nodes.items():
            if node_id in done:
                continue
            after = spec.after
            if not after or (done.issuperset(after) and not done_ok.isdisjoint(after)):
                found.append(node_id)
        return found

    def propagate_skips(self, completed: Iterable[str], skipped: list[str]) -> None:
        """Extend ``skipped`` with every node whose dependencies were all skipped."""
        done_ok = set(completed)
        changed = True
        while changed:
            changed = False
            done = done_ok | set(skipped)
            for node_id, spec in self.nodes.items():
                if node_id in done or not spec.after:
                    continue
                if all(d in skipped for d in spec.after):
                    skipped.append(node_id)
                    changed = True

    def unknown(self, names: Iterable[str]) -> list[str]:
        """Return the names that are not nodes of this graph."""
        return [n for n in names if n not in self.nodes]
