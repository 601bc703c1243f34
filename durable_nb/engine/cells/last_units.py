"""Names that were one unit at their last pickle, pickled together again from the start.

A cell that uses ``model`` alone, fitted on ``data`` like ``other_model``, would pickle ``model``
first, find from that pickle's ids that it shares ``data``, then pickle the three again together:
the first pickle is thrown away. When every name of the last unit still holds an object that
unit's pickle reached (kept alive, so no id is reused), they still share it and are pickled
together at once. A name bound to anything else (a new figure in ``fig``) leaves the unit to be
found again as before. Names that stopped sharing while each still holds what it held stay one
unit: pickled together, which costs more but never loses an identity.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ..pickling import in_reach
from .reference_walk import DisjointSets

__all__ = ["with_last_units"]


class _Entry(Protocol):
    reach: Any
    members: tuple[str, ...]


def with_last_units(
    groups: list[list[str]],
    known: Mapping[str, _Entry],
    namespace: Mapping[str, Any],
    skip: set[str],
    storable: Callable[[str], bool],
) -> list[list[str]]:
    """``groups`` with those holding names of one last unit joined, and that unit's other names added
    (none in ``skip``), where the unit still holds together."""
    names = [name for group in groups for name in group]
    position = {name: index for index, name in enumerate(names)}
    sets = DisjointSets(len(names) + sum(len(known[n].members) for n in names if n in known))
    for group in groups:
        for name in group[1:]:
            sets.join(position[group[0]], position[name])
    for name in list(names):
        entry = known.get(name)
        if entry is None or len(entry.members) < 2 or not _holds_together(entry, known, namespace, skip, storable):
            continue
        for member in entry.members:
            if member not in position:
                position[member] = len(names)
                names.append(member)
            sets.join(position[name], position[member])
    joined: dict[int, list[str]] = {}
    for index, name in enumerate(names):
        joined.setdefault(sets.find(index), []).append(name)
    return [sorted(group) for group in joined.values()]


def _holds_together(
    entry: _Entry,
    known: Mapping[str, _Entry],
    namespace: Mapping[str, Any],
    skip: set[str],
    storable: Callable[[str], bool],
) -> bool:
    """True if each name of the entry's unit is still one of it and holds an object its pickle reached."""
    reach = entry.reach
    if reach is None:
        return False
    for member in entry.members:
        other = known.get(member)
        if other is None or other.reach is not reach or member in skip or member not in namespace:
            return False
        if not storable(member) or not in_reach(reach, id(namespace[member])):
            return False
    return True
