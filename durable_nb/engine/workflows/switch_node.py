"""Switch nodes: a function chooses the branches after it; the others are skipped."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Hashable
from typing import Any

from ...errors import InvalidState
from ...model import EventType, NewEvent
from ..execution.attempts import Outcome
from .graph import NodeSpec
from .run_commits import RunCommits
from .run_progress import RunProgress

__all__ = ["Switches"]


class Switches:
    """Runs a run's switch nodes: routes recorded, the branches not taken skipped."""

    def __init__(self, progress: RunProgress, commits: RunCommits) -> None:
        self.progress = progress
        self.graph = progress.graph
        self.commits = commits

    async def run(self, spec: NodeSpec) -> Outcome:
        """Run a switch: choose branches, skip the others; no checkpoint of its own."""
        started = time.perf_counter()
        try:
            result = spec.fn(dict(self.progress.state))
            if asyncio.iscoroutine(result):
                result = await result
            key, chosen = self._branches(spec, result)
        except Exception as error:  # noqa: BLE001 - a failing router fails like any node
            return Outcome(spec.node_id, error=error, duration=time.perf_counter() - started)
        async with self.commits.guard():
            self.progress.routes[spec.node_id] = {"key": key, "nodes": chosen}
            self.progress.log.complete(spec.node_id)
            skipped_before = len(self.progress.skipped)
            self.progress.skipped.extend(n for n in self.graph.dependents(spec.node_id) if n not in chosen)
            self.graph.propagate_skips(self.progress.log.done, self.progress.skipped)
            self.progress.newly_done += [spec.node_id, *self.progress.skipped[skipped_before:]]
            self.commits.carry.append(NewEvent(EventType.NODE_FINISHED, spec.node_id, {"route": key, "chosen": chosen}))
        return Outcome(spec.node_id, duration=time.perf_counter() - started)

    def _branches(self, spec: NodeSpec, result: Any) -> tuple[str | None, list[str]]:
        branches: dict[str, Any] | None = spec.extra.get("branches")
        dependents = self.graph.dependents(spec.node_id)
        if branches is not None:
            if result is not None and (not isinstance(result, Hashable) or result not in branches):
                raise InvalidState(
                    f"Switch '{spec.label}' chose {result!r}, which is not one of its branches {sorted(branches)}."
                )
            target = branches.get(result) if result is not None else None
            nodes = [] if target is None else [target] if isinstance(target, str) else list(target)
            key = None if result is None else str(result)
        else:
            if not (
                result is None
                or isinstance(result, str)
                or (isinstance(result, (list, tuple, set, frozenset)) and all(isinstance(n, str) for n in result))
            ):
                raise InvalidState(
                    f"Switch '{spec.label}' returned {result!r}: a switch returns the name of a node after it, "
                    "a list of such names, or None to take no branch."
                )
            nodes = [] if result is None else [result] if isinstance(result, str) else list(result)
            key = None if result is None else ",".join(nodes)
        wrong = [n for n in nodes if n not in dependents]
        if wrong:
            raise InvalidState(
                f"Switch '{spec.label}' chose {wrong}, but only nodes that run after it can be chosen: {dependents}."
            )
        return key, nodes
