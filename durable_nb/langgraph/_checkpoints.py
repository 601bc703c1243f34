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
from ..model import Blob, CheckpointDraft, CheckpointState, CheckpointStatus, Commit, RunRecord, RunStatus, step_name
from ..store.protocol import Conflict, Store
from ..store.rows import addresses_json, dumps, snapshot_json
from ..store.state import snapshot_due
from ._runs import ThreadRuns
from ._shape import META, Head, address, check_metadata, checkpoint_id_of, metadata_json, node_of, our_id
from ._values import ChannelValues
from ._writes import after_claim, claim_pending

__all__ = ["CheckpointWriter"]

# A commit refused because the thread moved on meanwhile (another process wrote to it) is
# computed again from what is stored now, a bounded number of times.
_ATTEMPTS = 8


class _Step:
    """What a put's checkpoint stores after the thread's head: its values' addresses and the
    values to store, what it changed and output, its snapshot (if due) and its node."""

    __slots__ = ("blobs", "changes", "kind", "manifest", "node", "output", "put", "since", "snapshot")

    def __init__(
        self,
        put: _Put,
        manifest: dict[str, str],
        blobs: list[Blob],
        changes: dict[str, str | None],
        output: dict[str, str | None],
        snapshot: CheckpointState | None,
        since: int,
        kind: str,
        node: str | None,
    ) -> None:
        self.put = put
        self.manifest = manifest
        self.blobs = blobs
        self.changes = changes
        self.output = output
        self.snapshot = snapshot
        self.since = since
        self.kind = kind
        self.node = node

    def head_after(self, head: Head) -> Head:
        """Return the head the checkpoint leaves but for its seq (the commit's)."""
        info = self.put.info
        return Head(
            head.seq, info["id"], info["versions"], self.manifest, self.since, head.status, info["seen"], info["ts"]
        )


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
                step = self._step(serde, put, head, base)
                result = await self.store.commit(self._commit(put, run_id, head, base, step))
            except (Conflict, RunNotFound, TypeError, ValueError) as error:
                self._refused(put, run_id, error)
                continue
            return self._stored(put, run_id, result.run, step.head_after(head))
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
        remembered = self._runs.remembered_step(put.thread_id, put.ns)
        if remembered is None:
            return None
        run_id, head, seen = remembered
        parent_id = put.parent_id
        base = self._runs.base_at_head(head, parent_id)
        if base is None or (parent_id is not None and claim_pending((put.thread_id, put.ns, parent_id))):
            return None
        step = self._step(serde, put, head, base)
        put_step = getattr(self.store, "put_step", None)
        # The saver's own path, nearly every step's: the thread's status stays (the run row moves
        # its head only), so the checkpoint's row is built here and written as it is.
        own = put_step is not None and seen is not None and seen.head_seq == head.seq
        if own and not self._runs.moves(run_id, head, put.checkpoint_id):
            try:
                run = put_step(seen, self._row(put, run_id, base, step), step.blobs)
            except (TypeError, ValueError) as error:  # the metadata is not JSON: named, nothing written
                self._refused(put, run_id, error)
                raise  # not reached: _refused raises what it does not retry
            if run is not None:
                return self._stored(put, run_id, run, step.head_after(head))
        commit = self._commit(put, run_id, head, base, step)
        try:
            result = commit_now(commit)
        except (Conflict, RunNotFound, TypeError, ValueError) as error:
            self._refused(put, run_id, error)
            return None
        return None if result is None else self._stored(put, run_id, result.run, step.head_after(head))

    def _step(self, serde: SerializerProtocol, put: _Put, head: Head, base: tuple[Any, ...]) -> _Step:
        """Return what the checkpoint stores after ``head`` (following ``base``)."""
        info = put.info
        old = head.manifest
        # The values the head's state holds are neither written again nor checked to be stored:
        # every commit of a checkpoint checks, in its transaction, that the run's head is still
        # that one, and a prune keeps each run's head checkpoint and the values of its state.
        manifest, blobs = self._values.manifest(serde, put.checkpoint, put.new_versions, base, put.encoded, old)
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
        return _Step(put, manifest, blobs, changes, output, snapshot, since, kind, node)

    @staticmethod
    def _row(put: _Put, run_id: str, base: tuple[Any, ...], step: _Step) -> tuple[Any, ...]:
        """Return the checkpoint's row as the general commit writes it (its STEP_COLUMNS after
        run_id, seq and created_at; the other columns keep their defaults)."""
        changes, output, parent_id = step.changes, step.output, put.parent_id
        changes_json = addresses_json(changes) if changes else "{}"
        return (
            our_id(put.checkpoint_id, run_id),
            step_name(step.kind, step.node),
            step.node,
            (CheckpointStatus.FORK if step.kind == "fork" else CheckpointStatus.OK)._value_,
            changes_json,
            None if step.snapshot is None else snapshot_json(step.snapshot),
            our_id(parent_id, run_id) if parent_id else None,
            changes_json if output == changes else dumps(output),
            _seconds_between(base[3], put.info["ts"]),
            dumps({META: put.info}),
        )

    def _commit(self, put: _Put, run_id: str, head: Head, base: tuple[Any, ...], step: _Step) -> Commit:
        """Return the commit storing the checkpoint after ``head`` (following ``base``)."""
        info, checkpoint_id, parent_id = put.info, put.checkpoint_id, put.parent_id
        changes, output, snapshot, kind, node = step.changes, step.output, step.snapshot, step.kind, step.node
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
        return Commit(
            run_id,
            checkpoints=[draft],
            blobs=step.blobs,
            run=moved_on,
            # A step stored past the thread's stop answered the gates it waited at.
            release_interrupts=moved_on is not None and head.status is RunStatus.PAUSED,
            expect_head_seq=head.seq,
            seen=self._runs.row(run_id),
        )

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

    def _stored(self, put: _Put, run_id: str, run: RunRecord, head: Head) -> RunnableConfig:
        """Remember the run as the commit left it; return the stored checkpoint's config."""
        self._runs.advanced(run, head)
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
