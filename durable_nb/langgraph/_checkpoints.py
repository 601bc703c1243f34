"""Storing a LangGraph checkpoint as the next checkpoint of its thread's run.

A channel whose version did not move keeps its value's address (the value is neither serialized
nor written again); the run's head, remembered from the saver's last commit, tells what changed.
``put`` reads from the store what the saver does not remember; ``put_now`` is a sync graph's
step when it remembers everything (nearly every step): one blocking store call, no coroutine.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.checkpoint.serde.base import SerializerProtocol

from .._loop import loop_running
from ..errors import InvalidInput, RunNotFound, StoreError
from ..model import Blob, CheckpointDraft, CheckpointState, CheckpointStatus, Commit, CommitResult, RunStatus, step_name
from ..store.protocol import Conflict, Store
from ..store.state import snapshot_due
from ._runs import ThreadRuns
from ._shape import META, Head, address, check_metadata, checkpoint_id_of, metadata_json, node_of, our_id
from ._values import ChannelValues
from ._writes import after_claim, claim_pending

__all__ = ["CheckpointWriter"]

# A commit refused because the thread moved on meanwhile (another process wrote to it) is
# computed again from what is stored now, a bounded number of times.
_ATTEMPTS = 8


class _Put:
    """One put's checkpoint as LangGraph keeps it, checked, and what was encoded of it so far."""

    __slots__ = ("checkpoint", "checkpoint_id", "encoded", "info", "new_versions", "ns", "parent_id", "thread_id")

    def __init__(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> None:
        self.thread_id, self.ns = address(config)
        checkpoint_id = checkpoint.get("id") if type(checkpoint) is dict or isinstance(checkpoint, Mapping) else None
        if not isinstance(checkpoint_id, str) or not checkpoint_id:
            raise InvalidInput(
                f"put() takes a LangGraph Checkpoint (a dict with an 'id', as LangGraph makes), not {checkpoint!r}."
            )
        self.checkpoint_id: str = checkpoint_id
        self.parent_id = checkpoint_id_of(config)
        self.checkpoint = checkpoint
        self.new_versions = new_versions or {}
        info = {
            "id": checkpoint_id,
            "v": checkpoint.get("v", 1),
            "ts": checkpoint.get("ts"),
            "versions": dict(checkpoint.get("channel_versions") or {}),
            # Each node's seen versions as LangGraph made them for this checkpoint (its own copy:
            # LangGraph hands a copy of its checkpoint to put), not copied again.
            "seen": dict(checkpoint.get("versions_seen") or {}),
            "metadata": metadata_json(config, metadata),
        }
        # Left out when None (readers take None for missing): a null in the column costs its
        # JSON encoder a second pass (see store.rows.dumps).
        updated = checkpoint.get("updated_channels")
        if updated is not None:
            info["updated"] = updated
        if self.parent_id is not None:
            info["parent"] = self.parent_id
        self.info = info
        # The blobs encoded for a commit tried again.
        self.encoded: dict[str, Blob] = {}


class CheckpointWriter:
    """Store LangGraph checkpoints, each the next checkpoint of its thread's run."""

    def __init__(self, store: Store, runs: ThreadRuns, values: ChannelValues) -> None:
        self.store = store
        self._runs = runs
        self._values = values

    async def put(
        self,
        serde: SerializerProtocol,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint, reading what is not remembered of its thread; return its config."""
        put = _Put(config, checkpoint, metadata, new_versions)
        thread_id, ns, parent_id = put.thread_id, put.ns, put.parent_id
        for _ in range(_ATTEMPTS):
            run_id = self._runs.known(thread_id, ns) or await self._runs.open(thread_id, ns)
            if parent_id is not None and (waiting := after_claim((thread_id, ns, parent_id))) is not None:
                await waiting
            try:
                # Remembered, as a rule: the thread's last checkpoint is the one this saver wrote.
                head = self._runs.remembered(run_id) or await self._runs.head(run_id)
                base = self._runs.base_at_head(head, parent_id) or await self._runs.base(run_id, head, parent_id)
                commit, head_after = self._commit(serde, put, run_id, head, base)
                result = await self.store.commit(commit)
            except (Conflict, RunNotFound, TypeError, ValueError) as error:
                self._refused(put, run_id, error)
                continue
            return self._stored(put, run_id, result, head_after)
        raise StoreError(
            f"Thread {thread_id!r} kept changing while checkpoint {put.checkpoint_id} was written ({_ATTEMPTS} "
            "tries): other processes write to it at the same time. Give each concurrent run its own thread_id."
        )

    def put_now(
        self,
        serde: SerializerProtocol,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig | None:
        """Store a checkpoint in one blocking store call if the thread's head is remembered and no
        loop runs in this thread; return its config, or None: ``put`` stores it."""
        commit_now = getattr(self.store, "commit_now", None)
        if commit_now is None or loop_running():
            return None
        put = _Put(config, checkpoint, metadata, new_versions)
        run_id = self._runs.known(put.thread_id, put.ns)
        head = None if run_id is None else self._runs.remembered(run_id)
        if head is None or run_id is None:
            return None
        parent_id = put.parent_id
        base = self._runs.base_at_head(head, parent_id)
        if base is None or (parent_id is not None and claim_pending((put.thread_id, put.ns, parent_id))):
            return None
        commit, head_after = self._commit(serde, put, run_id, head, base)
        try:
            result = commit_now(commit)
        except (Conflict, RunNotFound, TypeError, ValueError) as error:
            self._refused(put, run_id, error)
            return None
        return None if result is None else self._stored(put, run_id, result, head_after)

    def _commit(
        self, serde: SerializerProtocol, put: _Put, run_id: str, head: Head, base: tuple[Any, ...]
    ) -> tuple[Commit, Head]:
        """Return the commit storing the checkpoint after ``head`` (following ``base``), and the
        head it leaves but for its seq (the commit's)."""
        info, checkpoint_id, parent_id = put.info, put.checkpoint_id, put.parent_id
        manifest, blobs = self._values.manifest(serde, put.checkpoint, put.new_versions, base, put.encoded)
        old = head.manifest
        changes: dict[str, str | None] = {k: a for k, a in manifest.items() if old.get(k) != a}
        # The channels this step changed: what history shows and counts the bytes of.
        output = dict(changes)
        for k in old:  # a loop, not a call per channel: most channels keep their value
            if k not in manifest:
                changes[k] = None
        since = head.since_snapshot + 1
        snapshot = None
        if snapshot_due(since, len(manifest)):
            snapshot, since = CheckpointState(dict(manifest), []), 0
        kind, node = node_of(info["metadata"], info["seen"], base[2])
        draft = CheckpointDraft(
            checkpoint_id=our_id(checkpoint_id, run_id),
            step=step_name(kind, node),
            node_id=node,
            status=CheckpointStatus.FORK if kind == "fork" else CheckpointStatus.OK,
            duration=_seconds_between(base[3], info["ts"]),
            changes=changes,
            snapshot=snapshot,
            node_output=output,
            parent_checkpoint_id=our_id(parent_id, run_id) if parent_id else None,
            extra={META: info},
        )
        moved_on = self._runs.status_after(run_id, head, checkpoint_id)
        commit = Commit(
            run_id,
            checkpoints=[draft],
            blobs=blobs,
            run=moved_on,
            # A step stored past the thread's stop answered the gates it waited at.
            release_interrupts=moved_on is not None and head.status is RunStatus.PAUSED,
            expect_head_seq=head.seq,
            seen=self._runs.row(run_id),
        )
        after = Head(head.seq, checkpoint_id, info["versions"], manifest, since, head.status, info["seen"], info["ts"])
        return commit, after

    def _refused(self, put: _Put, run_id: str, error: Exception) -> None:
        """Forget what a refused commit shows is stale (it is tried again), or raise its error."""
        if isinstance(error, Conflict):
            self._runs.moved(run_id, None)  # another writer moved the thread on: read it again
        elif isinstance(error, RunNotFound):
            self._runs.forget([run_id])  # the thread was deleted meanwhile: start it again
        else:
            # The commit encodes the metadata (nothing was written): name what is not JSON.
            check_metadata(put.info["metadata"])
            raise error

    def _stored(self, put: _Put, run_id: str, result: CommitResult, head: Head) -> RunnableConfig:
        """Remember the run as the commit left it; return the stored checkpoint's config."""
        run = result.run
        self._runs.committed(run)
        head.seq, head.status = run.head_seq, run.status
        self._runs.moved(run_id, head)
        return {
            "configurable": {"thread_id": put.thread_id, "checkpoint_ns": put.ns, "checkpoint_id": put.checkpoint_id}
        }


def _seconds_between(start: str | None, end: str | None) -> float | None:
    """Return the seconds between two LangGraph checkpoint times (ISO text), if both are known."""
    if not start or not end:
        return None
    try:
        seconds = (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except (TypeError, ValueError):
        return None
    return seconds if seconds >= 0 else None
