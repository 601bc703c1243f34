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
from typing import Any

from langgraph.checkpoint.base import WRITES_IDX_MAP, ChannelVersions, Checkpoint, CheckpointTuple
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.types import RESUME

from ..engine.state.values import ValueCodec
from ..errors import SerializationError, StoreError
from ..model import Blob, CheckpointRecord
from ..store import codec
from ..store.protocol import Store
from ._gates import with_decisions
from ._shape import checkpoint_of_write, lg, pick_writes, tuple_of, write_prefix

__all__ = ["ChannelValues", "Stored", "dumps"]


@dataclass(frozen=True, slots=True)
class Stored:
    """A stored LangGraph checkpoint as a listing reads it: its id in the store, what LangGraph
    keeps of it (``extra["langgraph"]``) and its channels' value addresses."""

    checkpoint_id: str
    info: dict[str, Any]
    manifest: dict[str, str]


def dumps(serde: SerializerProtocol, name: str, value: Any) -> tuple[str, bytes]:
    """Serialize a channel's value with LangGraph's serializer; a failure names the value."""
    try:
        return serde.dumps_typed(value)
    except Exception as error:  # a serializer may raise anything: name the value
        type_name = f"{type(value).__module__}.{type(value).__qualname__}"
        raise SerializationError(
            f"LangGraph's serializer ({type(serde).__name__}) cannot serialize {name!r} of type "
            f"{type_name}: {error}. Keep such objects out of the graph's state, or give the saver a "
            "serializer that handles them (DurableSaver(store, serde=…)).",
            name=name,
            type_name=type_name,
        ) from error


class ChannelValues:
    """Encode channel values and pending writes for a commit, and load stored checkpoints."""

    def __init__(self, store: Store, secret: bytes) -> None:
        self.store = store
        self._secret = secret
        # Encodes only (the saver never marks blobs stored): one for every call, not one per call.
        self._codec = ValueCodec(store, secret)

    def manifest(
        self,
        serde: SerializerProtocol,
        checkpoint: Checkpoint,
        new_versions: ChannelVersions,
        base: tuple[Any, ...],
        encoded: dict[str, tuple[str, list[Blob]]],
    ) -> tuple[dict[str, str], list[Blob]]:
        """Return the new checkpoint's channel -> address and the blobs to store.

        A channel whose version is the one the parent checkpoint stored keeps its address: its
        value is neither serialized nor written again. ``encoded`` keeps what was encoded for a
        commit tried again.
        """
        base_versions, base_manifest = base[0], base[1]
        values = checkpoint.get("channel_values") or {}
        manifest: dict[str, str] = {}
        blobs: list[Blob] = []
        fresh = {}
        for channel, version in (checkpoint.get("channel_versions") or {}).items():
            if channel not in new_versions and base_versions.get(channel) == version and channel in base_manifest:
                manifest[channel] = base_manifest[channel]
            elif channel in encoded:
                manifest[channel] = encoded[channel][0]
                blobs.extend(encoded[channel][1])
            elif channel in values:
                fresh[channel] = dumps(serde, channel, values[channel])
        if fresh:
            addresses, more = self._codec.encode(fresh)
            by_address = {blob.hash: blob for blob in more}
            for channel, value_address in addresses.items():
                mine = [by_address[value_address]] if value_address in by_address else []
                encoded[channel] = (value_address, mine)
                manifest[channel] = value_address
            blobs.extend(more)
        return manifest, list({blob.hash: blob for blob in blobs}.values())

    def writes(
        self,
        serde: SerializerProtocol,
        checkpoint_id: str,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> tuple[dict[str, str], list[Blob]]:
        """Return a task's writes as keyed results of their checkpoint, and the blobs to store."""
        prefix = write_prefix(checkpoint_id)
        # Special writes (errors, interrupts) replace earlier ones of their task: stored under a
        # new key each time, the latest wins when read.
        stamp = time.time_ns()
        values, about = {}, {}
        for i, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, i)
            key = f"{prefix}s:{task_id}:{idx}:{stamp}" if idx < 0 else f"{prefix}r:{task_id}:{idx}"
            values[key] = dumps(serde, channel, value)
            about[key] = [task_id, channel, task_path, idx]
        if not values:
            return {}, []
        # The value is stored as a channel holding it would be (the node's output is the next
        # checkpoint's channel value: one blob for both); a small JSON record names it.
        addresses, blobs = self._codec.encode(values)
        manifest = {}
        for key, value_address in addresses.items():
            record = codec.encode([*about[key], value_address], self._secret, key)
            blobs.append(Blob(record.hash, record.codec, record.data, parts=(value_address,)))
            manifest[key] = record.hash
        return manifest, blobs

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
        prefixes = {write_prefix(item.info["id"]): item.info["id"] for item in items}
        stored_writes = dict(await self.store.keyed_results_of(run_id, list(prefixes)))
        # Each checkpoint's writes, found once (not a scan of every write per checkpoint).
        keys_of: dict[str, list[str]] = {}
        for key in stored_writes:
            keys_of.setdefault(checkpoint_of_write(key), []).append(key)
        # A write names its value's address; the value is the blob a channel holding it names
        # too (a node's output is the next checkpoint's value): each address is read and checked once.
        wanted = {address for item in items for address in item.manifest.values()}
        typed = await self._load(wanted | set(stored_writes.values()))
        written = {key: typed[record] for key, record in stored_writes.items()}
        missing = {w[4] for w in written.values()} - typed.keys()
        if missing:
            typed.update(await self._load(missing))
        found = []
        for item in items:
            keys = keys_of.get(item.info["id"], [])
            writes = pick_writes([(key, written[key]) for key in keys])
            pending = [(w[0], w[1], serde.loads_typed(typed[w[4]])) for w in writes]
            made = (decisions or {}).get(item.checkpoint_id)
            if made:
                paths = {w[0]: w[2] for w in writes}
                stamps = {written[k][0]: int(k.rsplit(":", 1)[1]) for k in keys if written[k][1] == RESUME}
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
