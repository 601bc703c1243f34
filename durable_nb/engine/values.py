"""State values in and out of the store: encode only what changed, load by manifest."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import InvalidState, StoreError
from ..model import Blob
from ..store import codec
from ..store.protocol import Store

__all__ = ["ValueCodec", "check_state"]


def check_state(value: Any, what: str) -> dict[str, Any]:
    """Return ``value`` as a state dict, or raise InvalidState saying what was wrong."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidState(f"{what} must be a dict of state values (name -> value), not {type(value).__name__}.")
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        raise InvalidState(f"{what} has keys that are not strings: {bad[:5]!r}. State names are strings.")
    return dict(value)


class ValueCodec:
    """Encodes values to blobs and loads manifests, remembering which blobs the store holds."""

    def __init__(self, store: Store, secret: bytes) -> None:
        self.store = store
        self.secret = secret
        self._stored: set[str] = set()

    def encode(self, values: Mapping[str, Any]) -> tuple[dict[str, str], list[Blob]]:
        """Serialize ``values``; return their manifest and the blobs the store may lack.

        Raises SerializationError naming the first value that cannot be serialized, before
        anything is written.
        """
        manifest: dict[str, str] = {}
        blobs: dict[str, Blob] = {}
        for name, value in values.items():
            blob = codec.encode(value, self.secret, name)
            manifest[name] = blob.hash
            if blob.hash not in self._stored:
                blobs[blob.hash] = blob
        return manifest, list(blobs.values())

    def mark_stored(self, blobs: list[Blob]) -> None:
        """Remember blobs a committed transaction wrote."""
        self._stored.update(b.hash for b in blobs)

    async def load(self, manifest: Mapping[str, str]) -> dict[str, Any]:
        """Load every value of a manifest."""
        found = await self.store.get_blobs(manifest.values(), self.secret)
        missing = sorted(name for name, value_hash in manifest.items() if value_hash not in found)
        if missing:
            raise StoreError(
                f"The store lacks the stored values of {missing[:5]}; it was pruned or edited "
                "outside durable_nb. Fork from another checkpoint to go on."
            )
        self._stored.update(found)
        return {name: codec.decode(found[value_hash], self.secret) for name, value_hash in manifest.items()}

    async def load_one(self, value_hash: str) -> Any:
        """Load one value by its address."""
        found = await self.store.get_blobs([value_hash], self.secret)
        if value_hash not in found:
            raise StoreError(f"The store lacks the stored value {value_hash[:14]}…; it was pruned or edited.")
        self._stored.add(value_hash)
        return codec.decode(found[value_hash], self.secret)
