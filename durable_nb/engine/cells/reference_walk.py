"""Which notebook variables hold references to one another, found by a short walk before pickling.

``likely_units`` groups names whose values a bounded walk of their references finds reaching one
another (``fig`` and ``ax``), so that they are pickled once, together; ``reaches_any`` is that walk
for one value. Sharing a short walk misses is still found from the pickles' ids, at one more pickle.
"""

from __future__ import annotations

import gc
import sys
from collections import deque
from collections.abc import Container, Mapping
from types import ModuleType
from typing import Any

__all__ = ["SCAN_SKIP", "DisjointSets", "likely_units", "reaches_any"]

SCAN_SKIP = (str, bytes, int, float, complex, bool, type, ModuleType, type(None))


def reaches_any(value: Any, covered: Container[int], namespace: Mapping[str, Any], budget: int = 256) -> int | None:
    """Return the id of an object in ``covered`` that a short walk of ``value``'s references finds.

    A cheap look before a full pickle: ``axs`` or a display object holding a figure already
    pickled joins that figure's unit instead of walking the whole figure again. A miss only
    costs a pickle; sharing is still found from the pickles' reach.
    """
    numpy = sys.modules.get("numpy")
    ndarray = numpy.ndarray if numpy is not None else ()
    # Breadth first: an attribute such as ``ax.figure`` is two steps away, however deep the rest goes.
    pending = deque([value])
    seen: set[int] = set()
    while pending and len(seen) < budget:
        obj = pending.popleft()
        if id(obj) in seen or isinstance(obj, SCAN_SKIP) or obj is namespace:
            continue  # a function's globals are the namespace: every variable, shared with none
        if id(obj) in covered:
            return id(obj)
        seen.add(id(obj))
        referents = gc.get_referents(obj)
        if isinstance(obj, ndarray) and obj.dtype.hasobject and obj.size <= budget:
            referents = [*referents, *obj.flat]  # numpy does not report an object array's items
        pending.extend(referents)
    return None


class DisjointSets:
    """Disjoint sets of indexes 0..n-1 (union-find), each named by its smallest member."""

    def __init__(self, size: int) -> None:
        self.parent = list(range(size))

    def find(self, index: int) -> int:
        while self.parent[index] != index:
            self.parent[index] = self.parent[self.parent[index]]
            index = self.parent[index]
        return index

    def join(self, a: int, b: int) -> None:
        a, b = self.find(a), self.find(b)
        if a != b:
            self.parent[max(a, b)] = min(a, b)


def likely_units(names: list[str], namespace: Mapping[str, Any]) -> list[list[str]]:
    """Group names whose values a short walk finds referring to one another (``ax`` and ``fig``),
    so that each group is pickled once, together; sharing a short walk misses is found later."""
    tops = {id(namespace[n]): i for i, n in enumerate(names) if not isinstance(namespace[n], SCAN_SKIP)}
    sets = DisjointSets(len(names))
    for index, name in enumerate(names):
        value = namespace[name]
        others = tops.keys() - {id(value)}
        found = reaches_any(value, others, namespace) if others else None
        if found is not None:
            sets.join(index, tops[found])
    groups: dict[int, list[str]] = {}
    for index, name in enumerate(names):
        groups.setdefault(sets.find(index), []).append(name)
    return list(groups.values())
