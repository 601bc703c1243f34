"""Which notebook variables a cell changed, and how to store them so that shared objects stay shared.

After each durable cell the tracker pickles the variables the cell could have reached: the
names its code mentions or binds, the globals read by the functions among them, and any
variable sharing an object with one of those (found from the ids each pickle reached).
Variables that share objects form one unit, pickled and stored together as one group, so that
every identity between them holds after a restore. A unit whose pickle is byte for byte what
was stored (its fingerprint) is unchanged and costs nothing more; a changed one is stored
again, whatever path changed it (a method call, a loop variable, an alias, a closure).

Names whose values refer to one another (``fig``, ``ax``, a display object holding them) are
found by a short walk before pickling and pickled once, together; a name a short walk misses
joins its unit when the pickles' ids show the sharing, at the cost of one more pickle.
Variables the cell could not reach are not pickled at all. A variable restored from the store
is pickled once before the next cell runs (``baseline``): pickling an unpickled object need not
give the bytes of the first pickle (strings shared by identity before may not be after), so
what counts as unchanged is what this kernel holds right after the restore.
"""

# Annotations evaluated, not strings: the named tuples below keep them as their fields' types.

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..._collector import collector_paused
from ..._tuples import Typed
from ...model import Blob
from ...store import codec
from ..pickling import Pickled, in_reach, pickle_values, take_imported
from .last_units import with_last_units
from .reach_index import ReachIndex
from .reference_walk import DisjointSets, likely_units, reaches_any
from .unchanged import Witness, holds, witness

__all__ = ["Known", "NamespaceTracker", "StorePlan"]


class Known(Typed):
    """What the store holds for one variable, and what its value reached when last pickled."""

    address: str
    fingerprint: str | None  # of the pickle of its whole unit (``members``, in name order)
    reach: Any = None  # sorted ids of the mutable objects its unit reached; None until pickled here
    uses: frozenset[str] = frozenset()
    figures: frozenset[int] = frozenset()
    members: tuple[str, ...] = ()
    # Proof, for figures and fitted models, that the unit still pickles as it did (no pickle needed).
    witness: Witness | None = None
    held: Any = None  # the objects ``reach`` names, alive as long as it is (their ids stay theirs)


class StorePlan:
    """What one cell's commit writes for the namespace."""

    manifest: dict[str, str]
    blobs: list[Blob]
    unstored: dict[str, str]  # name to type
    reasons: dict[str, str]  # name to why it cannot be pickled
    known: dict[str, Known]

    __slots__ = ("blobs", "known", "manifest", "reasons", "unstored")

    def __init__(
        self,
        manifest: dict[str, str] | None = None,
        blobs: list[Blob] | None = None,
        unstored: dict[str, str] | None = None,
        reasons: dict[str, str] | None = None,
        known: dict[str, Known] | None = None,
    ) -> None:
        self.manifest = {} if manifest is None else manifest
        self.blobs = [] if blobs is None else blobs
        self.unstored = {} if unstored is None else unstored
        self.reasons = {} if reasons is None else reasons
        self.known = {} if known is None else known


class _Unit:
    """Names pickled together; ``dirty`` until their joint pickle covers every one of them.

    ``witness`` is set when the unit was not pickled because its witness held: ``pickled`` then
    only carries what the last pickle reached, its stream is not there.
    """

    names: list[str]
    pickled: Pickled
    dirty: bool
    witness: Witness | None

    __slots__ = ("dirty", "names", "pickled", "witness")

    def __init__(self, names: list[str], pickled: Pickled, dirty: bool = False, witness: Witness | None = None) -> None:
        self.names = names
        self.pickled = pickled
        self.dirty = dirty
        self.witness = witness

    def holds(self, object_id: int) -> bool:
        return in_reach(self.pickled.reach, object_id)


class _Covered:
    """The ids the units of a plan reached so far: small reaches in one set, large ones looked up
    in their own sorted ids (a figure's tens of thousands are never copied)."""

    _LARGE = 512

    def __init__(self, units: list[_Unit]) -> None:
        self.units = units  # the plan's own list, mutated in place
        self.small: set[int] = set()

    def add(self, unit: _Unit) -> None:
        if len(unit.pickled.reach) < self._LARGE:
            self.small.update(unit.pickled.reach.tolist())

    def rebuild(self) -> None:
        """Forget the ids of units taken out of the plan."""
        self.small.clear()
        for unit in self.units:
            self.add(unit)

    def __contains__(self, object_id: object) -> bool:
        if object_id in self.small:
            return True
        return any(unit.holds(object_id) for unit in self.units if len(unit.pickled.reach) >= self._LARGE)  # type: ignore[arg-type]

    def __bool__(self) -> bool:
        return any(len(unit.pickled.reach) for unit in self.units)


def _merge_sharing(units: list[_Unit], reach: ReachIndex) -> list[_Unit]:
    """Join units whose pickles reached a common mutable object (union-find over shared ids).

    Units kept unchanged are not walked id by id: two of them share what their known reaches
    shared, and a fresh pickle's ids are looked up in their sorted reaches.
    """
    sets = DisjointSets(len(units))
    if len(units) > 1:
        first: dict[int, int] = {}
        kept: list[int] = []
        for index, unit in enumerate(units):
            if unit.witness is not None and reach.known(unit.pickled.reach):
                kept.append(index)
                continue
            for object_id in unit.pickled.reach:
                owner = first.setdefault(object_id, index)
                if owner != index:
                    sets.join(owner, index)
        for position, index in enumerate(kept):
            unit = units[index]
            ids = unit.pickled.reach
            if len(ids) <= len(first):
                hits = [first[object_id] for object_id in ids if object_id in first]
            else:
                hits = [owner for object_id, owner in first.items() if unit.holds(object_id)]
            for owner in hits:
                sets.join(owner, index)
            for other in kept[:position]:
                if reach.shared(units[other].pickled.reach, ids):
                    sets.join(other, index)
    merged: dict[int, _Unit] = {}
    for index, unit in enumerate(units):
        root = sets.find(index)
        if root not in merged:
            merged[root] = unit
        else:
            merged[root].names.extend(unit.names)
            merged[root].dirty = True
    return list(merged.values())


def _type_name(value: Any) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}"


class NamespaceTracker:
    """The variables of one notebook run as the store holds them, and what changed since."""

    def __init__(self, secret: bytes) -> None:
        self.secret = secret
        self.known: dict[str, Known] = {}
        self._raw_addresses: dict[str, str] = {}
        self._stored_raw: set[str] = set()
        self._reach = ReachIndex()
        # Variables whose witness failed to hold (they change at each use: a result filling its
        # cache): no witness is taken again until a pickle finds them unchanged, so that a value
        # that keeps changing is not digested and pickled both, cell after cell (figures aside).
        self._changing: set[str] = set()

    def restored(self, name: str, address: str) -> None:
        """Record a variable just loaded from the store."""
        self._set(name, Known(address, None))

    def baseline(self, namespace: Mapping[str, Any]) -> None:
        """Pickle the variables restored since the last cell, before the next cell can change them."""
        restored: dict[str, list[str]] = {}
        for name, entry in list(self.known.items()):
            if entry.reach is None:
                if name in namespace:
                    restored.setdefault(entry.address, []).append(name)
                else:
                    self._pop(name)
        for address, names in restored.items():
            names.sort()
            try:
                result = pickle_values([namespace[n] for n in names], namespace)
            except Exception:  # noqa: BLE001 - no longer picklable: stored again if it can be
                self.drop(names)
                continue
            proof = witness([namespace[n] for n in names], result.buffers)
            for name in names:
                self._set(name, self._entry(address, result, names, proof))

    def _set(self, name: str, entry: Known) -> None:
        old = self.known.get(name)
        if old is not None and old.reach is not None and old.reach is not entry.reach:
            self._reach.remove(name, old.reach)
        self.known[name] = entry
        if entry.reach is not None and (old is None or old.reach is not entry.reach):
            self._reach.add(name, entry.reach)

    def _pop(self, name: str) -> None:
        self._changing.discard(name)
        old = self.known.pop(name, None)
        if old is not None and old.reach is not None:
            self._reach.remove(name, old.reach)

    def drop(self, names: Iterable[str]) -> None:
        """Forget variables that were deleted or can no longer be stored."""
        for name in names:
            self._pop(name)

    # The pickles and the witnesses' walks make many objects, kept until the plan is made.
    @collector_paused()
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
        take_imported()
        todo = {name for name in touched if name in namespace and storable(name)}
        for name, entry in self.known.items():
            if name in namespace and (entry.reach is None or entry.figures & open_figures) and storable(name):
                todo.add(name)
        plan = StorePlan()
        units: list[_Unit] = []
        covered = _Covered(units)
        seen: set[str] = set()
        queue: list[str] = []
        alone: set[str] = set()  # names pickled on their own, never joined to another unit
        # Witnesses found not to hold in this commit: a unit of many names is reached once per
        # name, and nothing changes while the commit runs, so each is checked once.
        refused: set[int] = set()

        def visit(result: Pickled) -> None:
            for other in sorted(result.uses | self._reach.holders(result.reach)):
                if other in namespace and other not in seen and storable(other):
                    queue.append(other)

        def join_holder(names: list[str]) -> bool:
            # Values a short walk finds reaching a unit already pickled in this commit (lines drawn on
            # the axes of a figure pickled just before) join it: pickled with it once, at the end,
            # rather than alone first to find the sharing from their own pickle.
            for name in names:
                found = reaches_any(namespace[name], covered, namespace) if covered else None
                if found is not None:
                    holder = next(u for u in units if u.holds(found))
                    holder.names.extend(names)
                    holder.dirty = True
                    return True
            return False

        def keep_unchanged(names: list[str]) -> bool:
            # A group known unchanged is kept as it was stored, without pickling it again.
            kept = self._unchanged(names, namespace, stored, storable, refused)
            if kept is None:
                return False
            seen.update(kept.names)
            units.append(kept)
            covered.add(kept)
            visit(kept.pickled)
            return True

        # Units a witness vouches for first, each kept whole: the short walks that group the other
        # names need not go through a figure or a forest that did not change.
        for name in sorted(todo):
            entry = self.known.get(name)
            if name not in seen and entry is not None and entry.witness is not None:
                keep_unchanged([name])
        groups = with_last_units(likely_units(sorted(todo - seen), namespace), self.known, namespace, seen, storable)
        for group in groups:
            names = [name for name in group if name not in seen]  # some came with a unit kept whole
            if not names:
                continue
            seen.update(names)
            if join_holder(names):
                continue
            try:
                result = pickle_values([namespace[n] for n in names], namespace)
            except Exception:  # noqa: BLE001 - one of them cannot be pickled: each is tried alone below
                seen.difference_update(names)
                queue.extend(reversed(names))
                continue
            units.append(_Unit(names, result))
            covered.add(units[-1])
            visit(result)
        while True:
            while queue:
                name = queue.pop()
                if name in seen:
                    continue
                seen.add(name)
                if (name not in alone and join_holder([name])) or keep_unchanged([name]):
                    continue
                try:
                    result = pickle_values([namespace[name]], namespace)
                except Exception as error:  # noqa: BLE001 - any failure to pickle means the value cannot be stored
                    plan.unstored[name] = _type_name(namespace[name])
                    plan.reasons[name] = str(error) or type(error).__name__
                    continue
                units.append(_Unit([name], result))
                covered.add(units[-1])
                visit(result)
            units[:] = _merge_sharing(units, self._reach)
            dirty = [unit for unit in units if unit.dirty]
            if not dirty:
                break
            for unit in dirty:
                unit.names.sort()
                try:
                    unit.pickled = pickle_values([namespace[n] for n in unit.names], namespace)
                except Exception as error:  # noqa: BLE001 - a value joined to the unit cannot be pickled
                    units.remove(unit)
                    covered.rebuild()
                    if alone.issuperset(unit.names):  # each was pickled alone: together they cannot be
                        for name in unit.names:
                            plan.unstored[name] = _type_name(namespace[name])
                            plan.reasons[name] = str(error) or type(error).__name__
                        continue
                    # A value joined to a unit was never pickled alone: each is, as any other is.
                    alone.update(unit.names)
                    seen.difference_update(unit.names)
                    queue.extend(reversed(unit.names))
                    continue
                unit.dirty = False
                unit.witness = None
                covered.add(unit)
                visit(unit.pickled)
        for unit in units:
            unit.names.sort()
            self._plan_unit(unit, namespace, stored, plan)
            unit.pickled.memo = None
        return plan

    def _unchanged(
        self,
        names: list[str],
        namespace: Mapping[str, Any],
        stored: Mapping[str, str],
        storable: Callable[[str], bool],
        refused: set[int],
    ) -> _Unit | None:
        """The whole unit ``names`` belong to, as last pickled, if its witness shows it unchanged (no pickle
        needed); a cell that names ``fig`` alone keeps ``fig, ax`` whole."""
        first = self.known.get(names[0])
        if first is None or first.witness is None or first.reach is None or first.fingerprint is None:
            return None
        if id(first.witness) in refused:
            return None
        members = first.members
        if not set(names) <= set(members) or not all(m in namespace and storable(m) for m in members):
            return None
        entries = [self.known.get(name) for name in members]
        for name, entry in zip(members, entries, strict=True):
            if entry is None or entry.witness is not first.witness or entry.members != members:
                return None
            if entry.address != stored.get(name):
                return None
        if not holds(first.witness, [namespace[n] for n in members]):
            refused.add(id(first.witness))
            self._changing.update(members)
            return None
        last = Pickled(b"", [], first.reach, first.uses, first.figures, first.fingerprint, [], held=first.held)
        return _Unit(list(members), last, witness=first.witness)

    def _plan_unit(self, unit: _Unit, namespace: Mapping[str, Any], stored: Mapping[str, str], plan: StorePlan) -> None:
        members = tuple(unit.names)
        entries = [self.known.get(name) for name in members]
        unchanged = all(
            entry is not None
            and entry.members == members
            and entry.fingerprint == unit.pickled.fingerprint
            and entry.address == stored.get(name)
            for name, entry in zip(members, entries, strict=True)
        )
        proof = unit.witness
        # A figure's witness costs little beside its pickle: always taken.
        if proof is None and (unchanged or unit.pickled.figures or self._changing.isdisjoint(members)):
            proof = witness([namespace[n] for n in members], unit.pickled.buffers)
            self._changing.difference_update(members)
        if unchanged:
            for name, entry in zip(members, entries, strict=True):
                assert entry is not None
                plan.known[name] = self._entry(entry.address, unit.pickled, members, proof)
            return
        group = unit.pickled
        parts = []
        for buffer, digest in zip(group.buffers, group.buffer_digests, strict=True):
            raw = buffer.raw()
            address = self._raw_addresses.get(digest)
            if address is None:
                address = self._raw_addresses[digest] = codec.raw_address(raw)
            if address not in self._stored_raw and all(b.hash != address for b in plan.blobs):
                plan.blobs.append(codec.encode_raw(raw, address))
            parts.append(codec.GroupPart(address, raw.readonly))
        blob = codec.encode_group(list(members), parts, group.stream, self.secret)
        plan.blobs.append(blob)
        for name in members:
            plan.manifest[name] = blob.hash
            plan.known[name] = self._entry(blob.hash, group, members, proof)

    @staticmethod
    def _entry(address: str, pickled: Pickled, members: Iterable[str], proof: Witness | None = None) -> Known:
        fields = (pickled.reach, pickled.uses, pickled.figures, tuple(members), proof, pickled.held)
        return Known(address, pickled.fingerprint, *fields)

    def committed(self, plan: StorePlan) -> None:
        """Take a plan's view of the namespace as the stored one, once its commit succeeded."""
        for name, entry in plan.known.items():
            self._set(name, entry)
        self.drop(plan.unstored)
        self._stored_raw.update(b.hash for b in plan.blobs if b.codec in (codec.RAW, codec.RAW_ZSTD))
