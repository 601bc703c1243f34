"""Which notebook variables a cell changed, and how to store them so that shared objects stay shared.

After each durable cell the tracker pickles the variables the cell could have reached: the
names its code mentions or binds, the globals read by the functions among them, and any
variable sharing an object with one of those (found from the ids each pickle reached). A
variable whose pickle is byte for byte what was stored (its fingerprint) is unchanged and
costs nothing more; a changed one is stored again, whatever path changed it (a method call,
a loop variable, an alias, a closure). Variables that share objects form one component and
are stored as one group, so that every identity between them holds after a restore.

Variables the cell could not reach are not pickled at all. A variable restored from the store
is pickled once before the next cell runs (``baseline``): pickling an unpickled object need not
give the bytes of the first pickle (strings shared by identity before may not be after), so
what counts as unchanged is what this kernel holds right after the restore.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..model import Blob
from ..store import codec
from .pickling import Pickled, pickle_values

__all__ = ["Known", "NamespaceTracker", "StorePlan"]


@dataclass(frozen=True, slots=True)
class Known:
    """What the store holds for one variable, and what its value reached when last pickled."""

    address: str
    fingerprint: str | None
    reach: Any = None  # sorted ids of the mutable objects reached; None until pickled here
    uses: frozenset[str] = frozenset()
    figures: frozenset[int] = frozenset()


@dataclass(slots=True)
class StorePlan:
    """What one cell's commit writes for the namespace."""

    manifest: dict[str, str] = field(default_factory=dict)
    groups: dict[str, list[str]] = field(default_factory=dict)
    blobs: list[Blob] = field(default_factory=list)
    unstored: dict[str, str] = field(default_factory=dict)
    known: dict[str, Known] = field(default_factory=dict)

    @property
    def bytes_written(self) -> int:
        """Bytes of the blobs this plan writes."""
        return sum(blob.size for blob in self.blobs)


class _Reach:
    """The ids every known variable reached, to find who else holds an object."""

    def __init__(self, known: Mapping[str, Known]) -> None:
        import numpy as np

        self.names = [name for name, entry in known.items() if entry.reach is not None and len(entry.reach)]
        if self.names:
            arrays = [known[name].reach for name in self.names]
            self.ids = np.concatenate(arrays)
            self.owners = np.repeat(np.arange(len(self.names)), [len(a) for a in arrays])
        else:
            self.ids = np.empty(0, dtype=np.int64)
            self.owners = np.empty(0, dtype=np.int64)

    def holders(self, reach: Any) -> set[str]:
        """Return the known variables that reached any of the ids in ``reach``."""
        import numpy as np

        if not self.names or not len(reach):
            return set()
        hit = np.isin(self.ids, reach, assume_unique=False)
        return {self.names[i] for i in np.unique(self.owners[hit])}


def _components(pickled: Mapping[str, Pickled]) -> list[list[str]]:
    """Group names whose values reach a common mutable object (union-find over shared ids)."""
    import numpy as np

    names = sorted(pickled)
    parent = list(range(len(names)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    arrays = [pickled[name].reach for name in names]
    if names and sum(len(a) for a in arrays):
        ids = np.concatenate(arrays)
        owners = np.repeat(np.arange(len(names)), [len(a) for a in arrays])
        order = np.argsort(ids, kind="stable")
        ids, owners = ids[order], owners[order]
        same = np.flatnonzero(ids[1:] == ids[:-1])
        for position in same:
            a, b = find(int(owners[position])), find(int(owners[position + 1]))
            if a != b:
                parent[max(a, b)] = min(a, b)
    groups: dict[int, list[str]] = {}
    for index, name in enumerate(names):
        groups.setdefault(find(index), []).append(name)
    return list(groups.values())


def _type_name(value: Any) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}"


class NamespaceTracker:
    """The variables of one notebook run as the store holds them, and what changed since."""

    def __init__(self, secret: bytes) -> None:
        self.secret = secret
        self.known: dict[str, Known] = {}
        self._raw_addresses: dict[str, str] = {}
        self._stored_raw: set[str] = set()
        self._reach: _Reach | None = None

    def forget(self) -> None:
        """Drop everything known (the kernel now works in another run)."""
        self.known.clear()
        self._reach = None

    def restored(self, name: str, address: str) -> None:
        """Record a variable just loaded from the store."""
        self.known[name] = Known(address, None)
        self._reach = None

    def baseline(self, namespace: Mapping[str, Any]) -> None:
        """Pickle the variables restored since the last cell, before the next cell can change them."""
        for name, entry in list(self.known.items()):
            if entry.reach is not None:
                continue
            if name not in namespace:
                self.known.pop(name)
                continue
            try:
                result = pickle_values([namespace[name]], namespace)
            except Exception:  # noqa: BLE001 - no longer picklable: it will be stored again if it can be
                self.known.pop(name)
                continue
            self.known[name] = self._entry(entry.address, result)
        self._reach = None

    def drop(self, names: Iterable[str]) -> None:
        """Forget variables that were deleted or can no longer be stored."""
        for name in names:
            self.known.pop(name, None)
        self._reach = None

    def note_raw_stored(self, addresses: Iterable[str]) -> None:
        """Remember buffers the store holds, so they are never sent to it again."""
        self._stored_raw.update(addresses)

    def plan(
        self,
        namespace: Mapping[str, Any],
        stored: Mapping[str, str],
        touched: Iterable[str],
        storable: Callable[[str], bool],
        open_figures: frozenset[int] = frozenset(),
    ) -> StorePlan:
        """Pickle what the cell could have changed; return what must be stored, grouped.

        ``stored`` is the run's manifest: a value counts as unchanged only if that is where the
        run already holds it (after a fork or a switch the kernel may hold another run's value).
        """
        live = [name for name in namespace if storable(name)]
        todo = {name for name in touched if name in namespace and storable(name)}
        for name in live:
            entry = self.known.get(name)
            if entry is not None and (entry.reach is None or entry.figures & open_figures):
                todo.add(name)
        if self._reach is None:
            self._reach = _Reach(self.known)
        plan = StorePlan()
        pickled: dict[str, Pickled] = {}
        while todo:
            name = todo.pop()
            if name in pickled or name in plan.unstored:
                continue
            try:
                result = pickle_values([namespace[name]], namespace)
            except Exception:  # noqa: BLE001 - any failure to pickle means the value cannot be stored
                plan.unstored[name] = _type_name(namespace[name])
                continue
            pickled[name] = result
            for other in result.uses | self._reach.holders(result.reach):
                if other in namespace and other not in pickled and storable(other):
                    todo.add(other)
        for members in _components(pickled):
            self._plan_component(members, pickled, namespace, stored, plan)
        for result in pickled.values():
            result.memo = None
        return plan

    def _plan_component(
        self,
        members: list[str],
        pickled: Mapping[str, Pickled],
        namespace: Mapping[str, Any],
        stored: Mapping[str, str],
        plan: StorePlan,
    ) -> None:
        entries = [self.known.get(name) for name in members]
        addresses = {stored.get(name) for name in members}
        unchanged = all(
            entry is not None and entry.fingerprint == pickled[name].fingerprint and entry.address == stored.get(name)
            for name, entry in zip(members, entries, strict=True)
        ) and len(addresses) == 1
        if unchanged:
            for name, entry in zip(members, entries, strict=True):
                assert entry is not None
                plan.known[name] = self._entry(entry.address, pickled[name])
            return
        group = pickled[members[0]] if len(members) == 1 else pickle_values([namespace[n] for n in members], namespace)
        parts = []
        for buffer, digest in zip(group.buffers, group.buffer_digests, strict=True):
            raw = buffer.raw()
            address = self._raw_addresses.get(digest)
            if address is None:
                address = self._raw_addresses[digest] = codec.raw_address(raw)
            if address not in self._stored_raw and all(b.hash != address for b in plan.blobs):
                plan.blobs.append(codec.encode_raw(raw, address))
            parts.append(codec.GroupPart(address, raw.readonly))
        blob = codec.encode_group(members, parts, group.stream, self.secret)
        plan.blobs.append(blob)
        plan.groups[blob.hash] = members
        for name in members:
            plan.manifest[name] = blob.hash
            plan.known[name] = self._entry(blob.hash, pickled[name])

    @staticmethod
    def _entry(address: str, pickled: Pickled) -> Known:
        return Known(address, pickled.fingerprint, pickled.reach, pickled.uses, pickled.figures)

    def committed(self, plan: StorePlan) -> None:
        """Take a plan's view of the namespace as the stored one, once its commit succeeded."""
        self.known.update(plan.known)
        self.drop(plan.unstored)
        self._stored_raw.update(b.hash for b in plan.blobs if b.codec == codec.RAW)
        self._reach = None
