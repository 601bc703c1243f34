"""Which known variables reached each object id: the index the namespace tracker finds sharing with."""

from __future__ import annotations

from typing import Any

__all__ = ["ReachIndex"]


class ReachIndex:
    """Which known variables reached each object id, kept up to date as the known entries change.

    Indexed by reach (the members of a unit share one): each reach's object ids are walked once,
    when it is added and when its last name goes, and which other reaches it shares an object
    with is kept beside it, so that the holders of a unit kept unchanged cost nothing to find.
    Plain Python (the tracker must not import numpy into a notebook that does not use it), and
    updated entry by entry: rebuilding it after every cell would cost as much as a cell.
    """

    def __init__(self) -> None:
        self.owners: dict[int, set[int]] = {}  # object id -> keys of the reaches that met it
        self.reaches: dict[int, Any] = {}  # key -> the reach itself (held: its id stays its key)
        self.names: dict[int, set[str]] = {}  # key -> the names whose entry holds that reach
        self.near: dict[int, set[int]] = {}  # key -> keys of the other reaches sharing an object with it

    def add(self, name: str, reach: Any) -> None:
        key = id(reach)
        names = self.names.get(key)
        if names is not None:
            names.add(name)
            return
        self.reaches[key] = reach
        self.names[key] = {name}
        near: set[int] = set()
        owners = self.owners
        for object_id in reach:
            keys = owners.get(object_id)
            if keys is None:
                owners[object_id] = {key}
            else:
                near.update(keys)
                keys.add(key)
        self.near[key] = near
        for other in near:
            self.near[other].add(key)

    def remove(self, name: str, reach: Any) -> None:
        key = id(reach)
        names = self.names.get(key)
        if names is None:
            return
        names.discard(name)
        if names:
            return
        del self.names[key], self.reaches[key]
        for other in self.near.pop(key):
            self.near[other].discard(key)
        for object_id in reach:
            keys = self.owners.get(object_id)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.owners[object_id]

    def shared(self, a: Any, b: Any) -> bool:
        """True if two known reaches met a common object."""
        return id(b) in self.near.get(id(a), ())

    def known(self, reach: Any) -> bool:
        """True if ``reach`` is a known entry's own (not a fresh pickle's)."""
        return self.reaches.get(id(reach)) is reach

    def holders(self, reach: Any) -> set[str]:
        """Return the known variables that reached any of the ids in ``reach``."""
        if self.known(reach):
            if not len(reach):
                return set()
            keys = {id(reach), *self.near[id(reach)]}
        else:
            owners = self.owners
            keys = {key for object_id in reach if object_id in owners for key in owners[object_id]}
        return {name for key in keys for name in self.names[key]}
