"""Where a notebook run's cells were committed, in it or the runs it was forked from, and the state before one."""

from __future__ import annotations

from ...model import CheckpointRecord, RunRecord, RunStatus
from ...store.protocol import Store
from ..runs.ownership import owner_alive

__all__ = ["CellLineage"]


class CellLineage:
    """Lookups across a notebook run's fork tree: a cell's commit, and the state just before it."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def lookup(self, run: RunRecord, node_id: str) -> CheckpointRecord | None:
        """Return the commit of a cell in ``run``, or in the runs it was forked from (an indexed lookup)."""
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

    async def matching_run(
        self, run: RunRecord, owner: str, manifest: dict[str, str], node_id: str, source_hash: str
    ) -> str | None:
        """Return another run of ``run``'s fork tree whose cell ``node_id`` ran this code from the state
        ``run`` had before the cell, so that going back to old code returns to that run."""
        here = await self.lookup(run, node_id)
        start = await self.state_before(here, node_id) if here is not None else dict(manifest)
        for other, _ in reversed(await self.store.fork_tree(run.run_id)):
            if other.run_id == run.run_id or other.status is RunStatus.COMPLETED:
                continue
            if (
                other.status is RunStatus.RUNNING
                and other.owner != owner
                and owner_alive(other.run_id, other.owner, other.lease_until)
            ):
                continue
            found = await self.store.node_checkpoint(other.run_id, node_id, "after:")
            if found is None or found.extra.get("source_hash") != source_hash:
                continue
            if await self.state_before(found, node_id) == start:
                return other.run_id
        return None

    async def state_before(self, checkpoint: CheckpointRecord, node: str) -> dict[str, str] | None:
        """Return the manifest of the run just before ``node`` started (the cell committed at ``checkpoint``)."""
        before_id = await self.before(checkpoint, node)
        if before_id is None:
            run = await self.store.get_run(checkpoint.run_id)
            if run.parent_run_id and run.parent_checkpoint_id:
                fork_point = await self.store.get_checkpoint(run.parent_run_id, run.parent_checkpoint_id)
                return (await self.store.state_at(run.parent_run_id, fork_point.seq)).manifest
            return dict(run.input_manifest)
        before = await self.store.get_checkpoint(checkpoint.run_id, before_id)
        return (await self.store.state_at(checkpoint.run_id, before.seq)).manifest

    async def before(self, checkpoint: CheckpointRecord, node: str) -> str | None:
        """Return the checkpoint ``node`` started from: the cell's own gate and decision checkpoints stepped over."""
        parent_id = checkpoint.parent_checkpoint_id
        while parent_id is not None:
            parent = await self.store.get_checkpoint(checkpoint.run_id, parent_id)
            if parent.node_id != node:
                return parent.checkpoint_id
            parent_id = parent.parent_checkpoint_id
        return None
