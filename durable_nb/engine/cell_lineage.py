"""Where a notebook run's cells were committed, in it or the runs it was forked from, and how to branch before one."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..errors import InvalidInput
from ..model import CheckpointRecord, RunStatus
from .forking import create_fork
from .overrides import OverrideText
from .ownership import lease_deadline, owner_alive

if TYPE_CHECKING:
    from .cells import CellRun

    _CellRun = CellRun
else:
    _CellRun = object

__all__ = ["CellLineage"]


class CellLineage(_CellRun):
    """A cell run's lookups across its fork tree, and its forks."""

    # -- finding committed cells ---------------------------------------------------------------

    async def lookup(self, node_id: str) -> CheckpointRecord | None:
        """Return the commit of a cell in this run, or in the runs it was forked from (an indexed lookup)."""
        run = self.run
        max_seq: int | None = None
        while True:
            found = await self.store.node_checkpoint(run.run_id, node_id, "after:", max_seq)
            if found is not None:
                return found
            if run.parent_run_id is None or run.parent_checkpoint_id is None:
                return None
            fork_point = await self.store.get_checkpoint(run.parent_run_id, run.parent_checkpoint_id)
            max_seq = fork_point.seq
            run = await self.store.get_run(run.parent_run_id)

    async def manifest_before(self, node: str | None) -> dict[str, str]:
        """Return where the values are stored just before cell ``node`` was committed (None: now)."""
        if node is None:
            return dict(self.manifest)
        committed = await self.lookup(node)
        if committed is None:
            raise InvalidInput(
                f"No cell {node!r} was committed in run {self.run_id} (or the runs it was forked from); "
                "%durable status lists the cells it has."
            )
        return await self._state_before(committed, node) or {}

    async def values_before(self, node: str | None, names: Iterable[str]) -> dict[str, Any]:
        """Return the named values where a fork would start: just before cell ``node`` (None: now)."""
        manifest = await self.manifest_before(node)
        wanted = {name: manifest[name] for name in names if name in manifest}
        return await self.values.load(wanted) if wanted else {}

    async def matching_run(self, node_id: str, source_hash: str) -> str | None:
        """Return another run of this fork tree whose cell ``node_id`` ran this code from the state
        this run had before the cell, so that going back to old code returns to that run."""
        here = await self.lookup(node_id)
        start = await self._state_before(here, node_id) if here is not None else dict(self.manifest)
        for run, _ in reversed(await self.store.fork_tree(self.run_id)):
            if run.run_id == self.run_id or run.status is RunStatus.COMPLETED:
                continue
            if (
                run.status is RunStatus.RUNNING
                and run.owner != self.owner
                and owner_alive(run.run_id, run.owner, run.lease_until)
            ):
                continue
            found = await self.store.node_checkpoint(run.run_id, node_id, "after:")
            if found is None or found.extra.get("source_hash") != source_hash:
                continue
            if await self._state_before(found, node_id) == start:
                return run.run_id
        return None

    async def _state_before(self, checkpoint: CheckpointRecord, node: str) -> dict[str, str] | None:
        before_id = await self._before(checkpoint, node)
        if before_id is None:
            run = await self.store.get_run(checkpoint.run_id)
            if run.parent_run_id and run.parent_checkpoint_id:
                fork_point = await self.store.get_checkpoint(run.parent_run_id, run.parent_checkpoint_id)
                return (await self.store.state_at(run.parent_run_id, fork_point.seq)).manifest
            return dict(run.input_manifest)
        before = await self.store.get_checkpoint(checkpoint.run_id, before_id)
        return (await self.store.state_at(checkpoint.run_id, before.seq)).manifest

    # -- forks --------------------------------------------------------------------------------

    async def fork_before(
        self,
        node: str,
        overrides: dict[str, Any] | OverrideText | None = None,
        *,
        key: str | None = None,
        owned: bool = True,
    ) -> CellRun:
        """Branch a new run from the state just before ``node`` was committed; this run is untouched.

        When that cell was committed before a fork point of this run, the overrides of the forks made
        since are carried into the new fork (restoring the cells above it gives what they give here),
        and ``overrides`` are applied over them. ``key`` makes the fork the run of that idempotency
        key; ``owned=False`` leaves it pending for whichever kernel attaches to it (by that key).
        """
        committed = await self.lookup(node)
        source_run = self.run
        source_id: str | None = None
        carried: dict[str, Any] = {}
        if committed is not None:
            source_run = await self.store.get_run(committed.run_id)
            source_id = await self._before(committed, node)
            over = self.forks.over(committed.run_id)
            carried = await self.values.load(over) if over else {}
        owner, lease = (self.owner, lease_deadline()) if owned else (None, None)
        fork = await create_fork(
            self.store,
            self.values,
            source_run.run_id,
            source_id,
            overrides,
            carried=carried,
            owner=owner,
            lease_until=lease,
            idempotency_key=key,
            at_start=source_id is None,
        )
        forked = await type(self).open(self.store, self.values, fork.run, self.tracker)
        forked.resumes.pop(node, None)
        return forked

    async def _before(self, checkpoint: CheckpointRecord, node: str) -> str | None:
        # Step back over the cell's own gate/decision checkpoints to where it started.
        parent_id = checkpoint.parent_checkpoint_id
        while parent_id is not None:
            parent = await self.store.get_checkpoint(checkpoint.run_id, parent_id)
            if parent.node_id != node:
                return parent.checkpoint_id
            parent_id = parent.parent_checkpoint_id
        return None
