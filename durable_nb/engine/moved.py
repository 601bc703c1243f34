"""Module paths the engine had before it was grouped into subpackages, still importable.

Values stored by earlier versions name classes and functions by the module that defined them
(a pickle holds ``durable_nb.engine.workflow.Workflow``, not the object); importing an old path
gives the module that now holds those names, so such values still load. (``engine.cells`` and
``engine.gates`` are packages now; what those modules held, a cell's run and a gate's pause, is
never part of a user's values.)
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

__all__ = ["MOVED", "install"]

MOVED = {
    "durable_nb.engine.run": "durable_nb.engine.runs.run",
    "durable_nb.engine.run_ids": "durable_nb.engine.runs.run_ids",
    "durable_nb.engine.status": "durable_nb.engine.runs.status",
    "durable_nb.engine.ownership": "durable_nb.engine.runs.ownership",
    "durable_nb.engine.watch": "durable_nb.engine.runs.watch",
    "durable_nb.engine.cancel": "durable_nb.engine.runs.cancel",
    "durable_nb.engine.recovery": "durable_nb.engine.runs.recovery",
    "durable_nb.engine.settle": "durable_nb.engine.runs.settle",
    "durable_nb.engine.calls": "durable_nb.engine.runs.calls",
    "durable_nb.engine.keys": "durable_nb.engine.runs.keys",
    "durable_nb.engine.values": "durable_nb.engine.state.values",
    "durable_nb.engine.lists": "durable_nb.engine.state.lists",
    "durable_nb.engine.statelog": "durable_nb.engine.state.statelog",
    "durable_nb.engine.drafts": "durable_nb.engine.state.drafts",
    "durable_nb.engine.attempts": "durable_nb.engine.execution.attempts",
    "durable_nb.engine.policy": "durable_nb.engine.execution.policy",
    "durable_nb.engine.scope": "durable_nb.engine.execution.scope",
    "durable_nb.engine.idempotent": "durable_nb.engine.execution.idempotent",
    "durable_nb.engine.map_driver": "durable_nb.engine.execution.map_driver",
    "durable_nb.engine.item_map": "durable_nb.engine.execution.item_map",
    "durable_nb.engine.executors": "durable_nb.engine.execution.executors",
    "durable_nb.engine.remote": "durable_nb.engine.execution.remote",
    "durable_nb.engine.workflow": "durable_nb.engine.workflows.workflow",
    "durable_nb.engine.definition": "durable_nb.engine.workflows.definition",
    "durable_nb.engine.graph": "durable_nb.engine.workflows.graph",
    "durable_nb.engine.runner": "durable_nb.engine.workflows.runner",
    "durable_nb.engine.run_progress": "durable_nb.engine.workflows.run_progress",
    "durable_nb.engine.run_commits": "durable_nb.engine.workflows.run_commits",
    "durable_nb.engine.stops": "durable_nb.engine.workflows.stops",
    "durable_nb.engine.switch_node": "durable_nb.engine.workflows.switch_node",
    "durable_nb.engine.map_node": "durable_nb.engine.workflows.map_node",
    "durable_nb.engine.cell_plan": "durable_nb.engine.cells.plan",
    "durable_nb.engine.cell_commit": "durable_nb.engine.cells.commit",
    "durable_nb.engine.cell_lineage": "durable_nb.engine.cells.lineage",
    "durable_nb.engine.cell_records": "durable_nb.engine.cells.records",
    "durable_nb.engine.cell_values": "durable_nb.engine.cells.kernel_values",
    "durable_nb.engine.cell_writer": "durable_nb.engine.cells.writer",
    "durable_nb.engine.namespace": "durable_nb.engine.cells.namespace",
    "durable_nb.engine.pickle_reach": "durable_nb.engine.cells.pickle_reach",
    "durable_nb.engine.decisions": "durable_nb.engine.gates.decisions",
    "durable_nb.engine.forking": "durable_nb.engine.forks.forking",
    "durable_nb.engine.fork_overrides": "durable_nb.engine.forks.lineage_values",
    "durable_nb.engine.overrides": "durable_nb.engine.forks.literals",
}


class _MovedLoader(importlib.abc.Loader):
    """Load an old path as the module it moved to: the same object, under both names."""

    def __init__(self, new: str) -> None:
        self._new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self._new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module was executed under its new name."""


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Find the old paths in ``MOVED``; every other import is left to the usual finders."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        return None if new is None else importlib.machinery.ModuleSpec(fullname, _MovedLoader(new))


def install() -> None:
    """Make the old module paths importable (once per process)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
