"""A workflow's nodes and their dependencies: validation, the next wave, skipped branches."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass, field
from typing import Any

from ...errors import ConfigurationError
from ..execution.policy import AttemptPolicy

__all__ = ["ITEM_KEY_PREFIX", "KINDS", "Graph", "NodeSpec"]

# A map's finished items wait in state under internal keys with this prefix until the map commits.
ITEM_KEY_PREFIX = "__map_"

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
    # None: eight at a time in this process; on an executor, every item is handed to it at once.
    max_concurrency: int | None = None
    # Where the function runs: None (the workflow's default), "local", a Dask client or an Executor.
    executor: Any = None
    extra: dict[str, Any] = field(default_factory=dict)
    # Whether ``fn`` is a coroutine function: asked at every attempt, worked out once.
    is_async: bool = field(init=False, repr=False, compare=False)
    # How the node is attempted (its retries and time limit per attempt): read by every map item.
    policy: AttemptPolicy = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(self.fn))
        object.__setattr__(self, "policy", AttemptPolicy(self.retry_count, self.timeout_seconds))

    @property
    def loop_key(self) -> str:
        """The state key holding a loop's iteration counter."""
        return f"__loop_{self.node_id}"

    def item_key(self, index: int) -> str:
        """The state key holding one finished item of a map node."""
        return f"{ITEM_KEY_PREFIX}{self.node_id}/{index}"


class Graph:
    """Nodes in definition order, each waiting for the nodes named in its ``after``."""

    def __init__(self, workflow_name: str) -> None:
        self.workflow_name = workflow_name
        self.nodes: dict[str, NodeSpec] = {}
        self._checked = False
        self._index: tuple[dict[str, list[str]], dict[str, int]] | None = None

    def add(self, spec: NodeSpec) -> None:
        """Add a node; a second node with the same id is a configuration error."""
        if spec.node_id in self.nodes:
            raise ConfigurationError(
                f"Workflow {self.workflow_name!r} already has a node {spec.node_id!r}; "
                "give the second one another name with name=..."
            )
        self.nodes[spec.node_id] = spec
        self._checked = False
        self._index = None

    def _dependents_and_positions(self) -> tuple[dict[str, list[str]], dict[str, int]]:
        # Built once per shape of the graph: the next wave is then found from the nodes that just
        # finished, not by scanning the whole graph at every commit.
        if self._index is None:
            dependents: dict[str, list[str]] = {n: [] for n in self.nodes}
            for node_id, spec in self.nodes.items():
                for dep in spec.after:
                    dependents.setdefault(dep, []).append(node_id)
            self._index = (dependents, {n: i for i, n in enumerate(self.nodes)})
        return self._index

    def dependents(self, node_id: str) -> list[str]:
        """Return the nodes that name ``node_id`` in their ``after``."""
        return list(self._dependents_and_positions()[0].get(node_id, []))

    def ready_after(
        self, current: Iterable[str], done_ok: Container[str], done: Container[str], finished: Iterable[str]
    ) -> list[str]:
        """Return the next wave given the last one (``current``) and the nodes just ``finished``.

        The same as ``ready`` for the same completed and skipped nodes, in time proportional to
        the nodes involved rather than to the graph.
        """
        dependents, positions = self._dependents_and_positions()
        found = {n for n in current if n not in done}
        for node_id in finished:
            for candidate in dependents.get(node_id, ()):
                after = self.nodes[candidate].after
                # map() rather than generators: this runs for every node of a run.
                if (
                    candidate not in done
                    and all(map(done.__contains__, after))
                    and any(map(done_ok.__contains__, after))
                ):
                    found.add(candidate)
        return sorted(found, key=positions.__getitem__)

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
        # Kahn's order: a node is placed once every node it runs after is; what is never placed
        # sits on a cycle (or after one).
        dependents, _ = self._dependents_and_positions()
        waiting = {n: len(set(s.after)) for n, s in self.nodes.items()}
        placeable = [n for n, count in waiting.items() if count == 0]
        placed = 0
        while placeable:
            node_id = placeable.pop()
            placed += 1
            for dependent in set(dependents.get(node_id, ())):
                waiting[dependent] -= 1
                if waiting[dependent] == 0:
                    placeable.append(dependent)
        if placed < len(self.nodes):
            stuck = sorted(n for n, count in waiting.items() if count > 0)
            raise ConfigurationError(
                f"Workflow {self.workflow_name!r} has a dependency cycle among {stuck}; "
                "remove one of their after= links."
            )
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
