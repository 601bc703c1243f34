"""The values forks set along a notebook run's lineage, and which restores they win over.

A fork's overrides are part of the state at its fork point. A cell committed before that point
(in the run it was forked from, or further up) still restores what it defined, but for the names
a fork made after it overrode, the override wins: Run All in any kernel then reaches the fork
point with the state the fork was made with. A cell committed after the fork point keeps its own
values, as it would live.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..._tuples import Typed
from ...store.protocol import Store

__all__ = ["ForkOverrides", "same_value", "shared_with"]


class ForkOverrides(Typed):
    """The overrides (name to address) of each fork along a run's lineage, nearest fork first.

    ``levels[i]`` is ``(ancestor, overrides)``: the i-th run up the lineage, and what the fork
    made from it (the run below it in the lineage) set.
    """

    levels: tuple[tuple[str, dict[str, str]], ...] = ()

    @classmethod
    async def read(cls, store: Store, run_id: str) -> ForkOverrides:
        """Read the overrides of every fork between ``run_id`` and the root of its tree (one query)."""
        tree = {run.run_id: (run, details) for run, details in await store.fork_tree(run_id)}
        levels = []
        current = tree.get(run_id)
        while current is not None and current[0].parent_run_id is not None:
            run, details = current
            levels.append((run.parent_run_id, dict(details.get("overrides") or {})))
            current = tree.get(run.parent_run_id)
        return cls(tuple(levels))

    def over(self, run_id: str) -> dict[str, str]:
        """Return the overrides that win over restoring a checkpoint of ancestor ``run_id``: those
        of every fork made after it in this lineage, a nearer fork winning over a farther one."""
        merged: dict[str, str] = {}
        for ancestor, overrides in self.levels:
            for name, address in overrides.items():
                merged.setdefault(name, address)
            if ancestor == run_id:
                return merged
        return {}  # the run itself (or no ancestor): nothing was forked after its checkpoints

    def in_force(self, manifest: Mapping[str, str]) -> dict[str, str]:
        """Return the overrides the run still holds: those no cell after its fork point replaced."""
        found: dict[str, str] = {}
        for _, overrides in self.levels:
            for name, address in overrides.items():
                if name not in found and manifest.get(name) == address:
                    found[name] = address
        return found


def shared_with(manifest: Mapping[str, str], names: Iterable[str]) -> dict[str, list[str]]:
    """For each of ``names``, the other variables stored in the same group (sharing objects with it)."""
    overridden = set(names)
    shared: dict[str, list[str]] = {}
    for name in sorted(overridden):
        address = manifest.get(name)
        others = sorted(m for m, a in manifest.items() if a == address and m not in overridden)
        if address is not None and others:
            shared[name] = others
    return shared


def same_value(held: Any, wanted: Any) -> bool:
    """Tell whether the kernel holds ``wanted`` (the same object, or an equal value of the same type)."""
    if held is wanted:
        return True
    if type(held) is not type(wanted):
        return False
    try:
        equal = held == wanted
    except Exception:  # noqa: BLE001 - values that cannot be compared count as different
        return False
    return equal if isinstance(equal, bool) else False
