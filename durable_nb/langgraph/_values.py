"""Channel values and pending writes as stored, and loaded back into LangGraph's tuples.

Values are serialized by LangGraph's serializer and stored by content address, signed: a value
changed in or added to the store is refused, never deserialized. The serializer is the saver's,
passed to each call: LangGraph clones a saver with another serializer (``with_allowlist``), and
the clone shares this object.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from langgraph.checkpoint.base import WRITES_IDX_MAP, ChannelVersions, Checkpoint, CheckpointTuple
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.types import RESUME

from ..errors import SerializationError, StoreError
from ..model import Blob, CheckpointRecord, WriteRow
from ..store import codec
from ..store.protocol import Store
from ._gates import with_decisions
from ._shape import lg, tuple_of

__all__ = ["ChannelValues", "Stored"]


@dataclass(frozen=True, slots=True)
class Stored:
    """A stored LangGraph checkpoint as a listing reads it: its id in the store, what LangGraph
    keeps of it (``extra["langgraph"]``) and its channels' value addresses."""

    checkpoint_id: str
    info: dict[str, Any]
    manifest: dict[str, str]


def _unserializable(serde: SerializerProtocol, name: str, value: Any, error: Exception) -> SerializationError:
    """Return the error saying that LangGraph's serializer failed on a channel's value (naming it)."""
    type_name = f"{type(value).__module__}.{type(value).__qualname__}"
    return SerializationError(
        f"LangGraph's serializer ({type(serde).__name__}) cannot serialize {name!r} of type "
        f"{type_name}: {error}. Keep such objects out of the graph's state, or give the saver a "
        "serializer that handles them (DurableSaver(store, serde=…)).",
        name=name,
        type_name=type_name,
    )


_ABSENT = object()
# How many small values (of how many bytes at most) ChannelValues remembers the blobs of.
_RECENT_VALUES = 64
_RECENT_BYTES = 1024


# A stored write's place in LangGraph's order, writes_sort_key(task_path, task_id, idx), read
# off the row in C: a listing sorts every write it loads.
_write_order = itemgetter(4, 1, 2)


class ChannelValues:
    """Encode channel values and pending writes for a commit, and load stored checkpoints."""

    def __init__(self, store: Store, secret: bytes) -> None:
        self.store = store
        self._secret = secret
        # The blobs of the small values encoded last, by what the serializer made of them: a step's
        # checkpoint holds the values its tasks just wrote (the same bytes), not pickled and signed
        # again. A blob is a function of those bytes and the key, so a hit is always right.
        self._recent: dict[tuple[str, bytes], Blob] = {}

    def manifest(
        self,
        serde: SerializerProtocol,
        checkpoint: Checkpoint,
        new_versions: ChannelVersions,
        base: tuple[Any, ...],
        encoded: dict[str, Blob],
        held: Mapping[str, str],
    ) -> tuple[dict[str, str], list[Blob]]:
        """Return the new checkpoint's channel -> address and the blobs to store.

        A channel whose version is the one the parent checkpoint stored keeps its address: its
        value is neither serialized nor written again. A value the state ``held`` (the run's
        head's) holds is not among the blobs to store: the commit checks the head is still that
        one, whose values a prune keeps. ``encoded`` keeps what was encoded for a commit tried again.
        """
        base_versions, base_manifest = base[0], base[1]
        held_addresses = held.values()  # a state of a few channels, as a rule: looked through in C
        values = checkpoint.get("channel_values") or {}
        versions = checkpoint.get("channel_versions") or {}
        manifest: dict[str, str] = {}
        blobs: dict[str, Blob] = {}
        # Only a channel holding a value now or in the base can have an address: not the many
        # whose value was consumed (a branch taken), which a long graph keeps versions of.
        for channel in {**values, **base_manifest}:
            version = versions.get(channel, _ABSENT)
            if version is _ABSENT:
                continue
            if channel not in new_versions and base_versions.get(channel) == version and channel in base_manifest:
                manifest[channel] = base_manifest[channel]
                continue
            blob = encoded.get(channel)
            if blob is None:
                if channel not in values:
                    continue
                value = values[channel]
                try:
                    typed = serde.dumps_typed(value)
                except Exception as error:  # a serializer may raise anything: name the value
                    raise _unserializable(serde, channel, value, error) from error
                blob = encoded[channel] = self._blob(channel, typed)
            manifest[channel] = blob.hash
            if blob.hash not in held_addresses:
                blobs[blob.hash] = blob
        return manifest, list(blobs.values())

    def writes(
        self,
        serde: SerializerProtocol,
        checkpoint_id: str,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> tuple[list[WriteRow], list[Blob]]:
        """Return a task's writes as rows of their checkpoint, signed, and the blobs to store."""
        # The value is stored as a channel holding it would be (the node's output is the next
        # checkpoint's channel value: one blob for both); the row names it. Special writes
        # (errors, interrupts) replace earlier ones of their task.
        kept: dict[int, tuple[int, str, Blob]] = {}
        for i, (channel, value) in enumerate(writes):
            try:
                typed = serde.dumps_typed(value)
            except Exception as error:  # a serializer may raise anything: name the value
                raise _unserializable(serde, channel, value, error) from error
            idx = WRITES_IDX_MAP.get(channel, i)
            kept[idx] = (idx, channel, self._blob(channel, typed))
        if not kept:
            return [], []
        fields: list[tuple[int, str, str]] = []
        blobs: dict[str, Blob] = {}
        for idx, channel, blob in kept.values():
            fields.append((idx, channel, blob.hash))
            blobs[blob.hash] = blob
        macs = codec.write_macs(self._secret, checkpoint_id, task_id, task_path, fields)
        # A special write's stamp says when, so that the latest is kept (a plain one's is 0).
        stamp = time.time_ns()
        rows = [
            WriteRow(checkpoint_id, task_id, idx, channel, task_path, address, stamp if idx < 0 else 0, mac)
            for (idx, channel, address), mac in zip(fields, macs, strict=True)
        ]
        return rows, list(blobs.values())

    def _blob(self, name: str, typed: Any) -> Blob:
        """Return the signed blob of a value as the serializer made it: (type name, bytes), as a rule."""
        # Looked up first: a step's checkpoint holds the values its tasks just wrote. Only a
        # checked pair is ever kept, so a hit needs no check.
        if type(typed) is tuple:
            try:
                blob = self._recent.get(typed)
            except TypeError:  # a pair holding what cannot be hashed: not a serializer's bytes
                blob = None
            if blob is not None:
                return blob
        if type(typed) is not tuple or len(typed) != 2 or type(typed[0]) is not str or type(typed[1]) is not bytes:
            return codec.encode(typed, self._secret, name)
        blob = codec.encode_typed(typed, self._secret)
        if len(typed[1]) <= _RECENT_BYTES:
            if len(self._recent) >= _RECENT_VALUES:
                self._recent.clear()
            self._recent[typed] = blob
        return blob

    async def _load(self, addresses: set[str]) -> dict[str, Any]:
        """Read and check the values at ``addresses`` (LangGraph's, each stored whole) in one read."""
        found = await self.store.get_blobs(addresses, self._secret)
        if len(found) < len(addresses):
            raise StoreError(
                f"The store lacks the stored values {sorted(addresses - found.keys())[:3]} of a thread's "
                "checkpoints; it was pruned or edited outside durable_nb. Go on from another checkpoint."
            )
        secret = self._secret
        return {address: codec.decode(blob, secret) for address, blob in found.items()}

    async def stored(self, record: CheckpointRecord) -> Stored:
        """Return a stored LangGraph checkpoint with the addresses of its channel values."""
        return Stored(record.checkpoint_id, lg(record), (await self.store.state_at(record.run_id, record.seq)).manifest)

    async def tuples(
        self,
        serde: SerializerProtocol,
        thread_id: str,
        ns: str,
        run_id: str,
        items: Sequence[Stored],
        decisions: Mapping[str, list[CheckpointRecord]] | None = None,
    ) -> list[CheckpointTuple]:
        """Load stored checkpoints of one run with their values and pending writes (and, as
        resume writes, the decisions recorded at their gates): one read of their writes, one of
        their values."""
        stored = await self.store.pending_writes_of(run_id, [item.info["id"] for item in items])
        secret = self._secret
        # Each checkpoint's writes, each checked against its signature, in LangGraph's order.
        writes_of: dict[str, list[WriteRow]] = {}
        codec.check_writes(secret, stored)
        for write in stored:
            writes_of.setdefault(write.checkpoint_id, []).append(write)
        # A write's value is the blob a channel holding it names too (a node's output is the next
        # checkpoint's value): each address is read and checked once.
        wanted = {address for item in items for address in item.manifest.values()}
        typed = await self._load(wanted | {write.value_hash for write in stored})
        found = []
        for item in items:
            writes = sorted(writes_of.get(item.info["id"], []), key=_write_order)
            pending = [(w.task_id, w.channel, serde.loads_typed(typed[w.value_hash])) for w in writes]
            made = (decisions or {}).get(item.checkpoint_id)
            if made:
                paths = {w.task_id: w.task_path for w in writes}
                stamps = {w.task_id: w.stamp for w in writes if w.channel == RESUME}
                pending = with_decisions(pending, paths, stamps, made)
            found.append(
                tuple_of(
                    thread_id,
                    ns,
                    item.info,
                    {channel: serde.loads_typed(typed[address]) for channel, address in item.manifest.items()},
                    pending,
                )
            )
        return found
