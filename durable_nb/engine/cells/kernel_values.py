"""A kernel's values and a run's stored ones: restoring a committed cell, and keeping what forks set."""

from __future__ import annotations

from typing import Any

from ...errors import StoreError
from ...model import CheckpointRecord
from ..forks.lineage_values import ForkOverrides, same_value, shared_with
from ..state.values import ValueCodec
from .namespace import NamespaceTracker
from .records import HeldOverrides, Restorable

__all__ = ["KernelValues"]

_MISSING = object()


class KernelValues:
    """Loads a run's values into a kernel's namespace, with the overrides of the forks along its lineage."""

    def __init__(self, values: ValueCodec, tracker: NamespaceTracker, forks: ForkOverrides) -> None:
        self.values = values
        self.tracker = tracker
        self.forks = forks
        self._entered = False  # the kernel reached this run's part after the fork point
        self._held: dict[str, int] = {}  # override name -> id of the kernel's value last checked

    async def restore(
        self, checkpoint: CheckpointRecord, namespace: dict[str, Any], exclude: frozenset[str] = frozenset()
    ) -> Restorable:
        """Load a committed cell's values into ``namespace`` (its variables that share objects
        are loaded together) and return its outputs; one read of the store brings everything.

        For a cell committed before a fork point of this run, what the fork set wins over what
        the cell defined (or deleted).
        """
        extra = checkpoint.extra
        stored = {k: v for k, v in (checkpoint.node_output or {}).items() if k not in exclude}
        deleted = [name for name in extra.get("deleted", []) if name not in exclude]
        won = self.overrides_over(checkpoint, exclude)
        manifest = {**stored, **won}
        wanted = [extra[key] for key in ("outputs", "settings", "result") if extra.get(key)]
        loaded, blobs = await self.values.load_with({0: manifest}, wanted, namespace)
        values = loaded[0]
        outputs_hash = extra.get("outputs")
        if outputs_hash and outputs_hash not in blobs:
            raise StoreError(f"The store lacks the stored value {outputs_hash[:14]}…; it was pruned or edited.")
        outputs = self.values.decode(blobs[outputs_hash]) if outputs_hash else []
        namespace.update(values)
        for name, address in manifest.items():
            self.tracker.restored(name, address)
        gone = [name for name in deleted if name not in won]
        for name in gone:
            namespace.pop(name, None)
        self.tracker.drop(gone)
        return Restorable(
            checkpoint,
            list(values),
            outputs,
            dict(extra.get("unstored", {})),
            reasons=extra.get("reasons", {}),
            overridden=sorted(won),
            shared=shared_with(stored, won),
            blobs=blobs,
            decode=self.values.decode,
        )

    def overrides_over(self, checkpoint: CheckpointRecord, exclude: frozenset[str]) -> dict[str, str]:
        """The overrides of forks made after ``checkpoint`` that name what its cell defined or deleted."""
        touched = {*(checkpoint.node_output or {}), *checkpoint.extra.get("deleted", [])} - exclude
        return {name: address for name, address in self.forks.over(checkpoint.run_id).items() if name in touched}

    async def reapply_overrides(
        self, checkpoint: CheckpointRecord, namespace: dict[str, Any], exclude: frozenset[str] = frozenset()
    ) -> list[str]:
        """Put back what forks made after ``checkpoint`` set, once its cell ran again (``--replay``)."""
        return await self._put(self.overrides_over(checkpoint, exclude), namespace)

    async def reapply_in_force(
        self, namespace: dict[str, Any], changed: list[str], manifest: dict[str, str]
    ) -> list[str]:
        """Put back the overrides still in force among ``changed``, after a cell the run completed before
        its fork point ran again (its checkpoint was pruned): it stands for a restore, not a new value."""
        in_force = self.forks.in_force(manifest)
        return await self._put({name: in_force[name] for name in changed if name in in_force}, namespace)

    async def _put(self, won: dict[str, str], namespace: dict[str, Any]) -> list[str]:
        if won:
            namespace.update(await self.values.load(won, namespace))
            for name, address in won.items():
                self.tracker.restored(name, address)
        return sorted(won)

    async def hold(self, namespace: dict[str, Any], manifest: dict[str, str]) -> HeldOverrides:
        """Check that the kernel holds the values this run's forks set (and no later cell replaced).

        The first time the kernel reaches the run after its fork point, a differing or missing
        value is put in place (a plain cell, or a kernel that never restored the cell defining
        it, holds another); afterwards a difference is a change made on purpose and is reported
        once, never undone.
        """
        held = HeldOverrides()
        in_force = self.forks.in_force(manifest)
        # A value already checked and still bound to the same object needs no look at the store.
        unsure = {n: a for n, a in in_force.items() if n not in namespace or self._held.get(n) != id(namespace[n])}
        wanted = await self.values.load(unsure, namespace) if unsure else {}
        for name, value in wanted.items():
            current = namespace.get(name, _MISSING)
            if current is not _MISSING and same_value(current, value):
                self._held[name] = id(current)
            elif not self._entered:
                namespace[name] = value
                self.tracker.restored(name, in_force[name])
                self._held[name] = id(value)
                held.placed[name] = value
            else:
                self._held[name] = id(current)  # reported once for this value
                held.changed[name] = value
        self._entered = True
        return held
