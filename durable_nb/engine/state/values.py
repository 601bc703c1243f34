"""State values in and out of the store: encode only what changed, load by manifest."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from ...errors import InvalidInput, InvalidState, StoreError, TamperedValueError
from ...model import Blob
from ...store import codec
from ...store.protocol import Store
from ..pickling import restoring_into, unpickle
from .lists import AppendedLists

__all__ = ["RESERVED_PREFIX", "ValueCodec", "check_state", "refuse_reserved"]

K = TypeVar("K")


RESERVED_PREFIX = "__"


def check_state(value: Any, what: str, *, from_node: bool = False) -> dict[str, Any]:
    """Return ``value`` as a state dict, or raise InvalidState saying what was wrong.

    Names starting with ``__`` hold the engine's own bookkeeping (loop counters, map items):
    input from outside a node (run input, fork values) may not set them.
    """
    if value is None:
        return {}
    # A dict (every node's result, nearly) is a Mapping: no ABC check for it.
    if type(value) is not dict and not isinstance(value, Mapping):
        raise InvalidState(f"{what} must be a dict of state values (name -> value), not {type(value).__name__}.")
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        raise InvalidState(f"{what} has keys that are not strings: {bad[:5]!r}. State names are strings.")
    if not from_node:
        refuse_reserved(value, what)
    return dict(value)


def refuse_reserved(names: Iterable[str], what: str, error: type[InvalidInput] = InvalidState) -> None:
    """Raise ``error`` (InvalidState) when a name is one of the engine's own (``__`` and more)."""
    reserved = sorted(n for n in names if n.startswith(RESERVED_PREFIX))
    if reserved:
        raise error(
            f"{what} sets {reserved[:5]!r}: names starting with '__' are reserved for durable_nb's own "
            "bookkeeping (loop counters, map items) and cannot be set from outside; use another name."
        )


@contextmanager
def _visible(namespace: dict[str, Any] | None, names: Mapping[str, Any]) -> Iterator[None]:
    """Put the ``names`` that ``namespace`` lacks into it for the block, and take them out after."""
    if namespace is None:
        yield
        return
    added = {name: value for name, value in names.items() if name not in namespace}
    namespace.update(added)
    try:
        yield
    finally:
        for name, value in added.items():
            if namespace.get(name) is value:
                del namespace[name]


def _buffer(data: Any, readonly: bool, taken: bool) -> Any:
    # Each writable array gets memory of its own: two arrays that only held equal bytes must
    # not become one (pandas' copy-on-write would no longer see writes between them).
    if readonly:
        return memoryview(data).toreadonly()
    if isinstance(data, bytearray) and not taken:
        return data
    return bytearray(data)


class ValueCodec:
    """Encodes values to blobs and loads manifests, remembering which blobs the store holds."""

    def __init__(self, store: Store, secret: bytes) -> None:
        self.store = store
        self.secret = secret
        self._stored: set[str] = set()
        self.lists = AppendedLists(secret)

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

    def encode_updates(
        self, updates: Mapping[str, Any], manifest: Mapping[str, str]
    ) -> tuple[dict[str, str], list[Blob]]:
        """Like ``encode``, but a list that extends the value it replaces (a history a loop or an
        agent appends to) stores only its new items, as a chunk after the chunks stored before."""
        plain = {}
        addresses: dict[str, str] = {}
        blobs: list[Blob] = []
        for name, value in updates.items():
            appended = self.lists.append(name, value, manifest.get(name))
            if appended is None:
                plain[name] = value
            else:
                addresses[name] = appended[0]
                blobs.extend(appended[1])
        delta, more = self.encode(plain)
        sizes = {blob.hash: blob.size for blob in more}
        for name, address in delta.items():
            self.lists.remember_whole(address, plain[name], sizes.get(address))
        if not addresses:
            return delta, more  # no list appended to (a node's usual result): both made afresh above
        return {**delta, **addresses}, [*(b for b in blobs if b.hash not in self._stored), *more]

    def list_of_items(self, addresses: list[str]) -> Blob:
        """Return the blob of a list whose items are stored values (a map's results, as they finished)."""
        return self.lists.of_items(addresses)

    def mark_stored(self, blobs: list[Blob]) -> None:
        """Remember blobs a committed transaction wrote."""
        for blob in blobs:
            self._stored.add(blob.hash)

    def unstored(self, blobs: list[Blob]) -> list[Blob]:
        """Return those of ``blobs`` no committed transaction of this codec wrote (the store may lack them)."""
        return [b for b in blobs if b.hash not in self._stored]

    async def load(self, manifest: Mapping[str, str], namespace: dict[str, Any] | None = None) -> dict[str, Any]:
        """Load every value of a manifest; notebook functions among them read ``namespace`` as their globals.

        The variables of one group are unpickled together, so the objects they share are shared again.
        """
        return (await self.load_many({0: manifest}, namespace))[0]

    async def load_many(
        self, manifests: Mapping[K, Mapping[str, str]], namespace: dict[str, Any] | None = None
    ) -> dict[K, dict[str, Any]]:
        """Load the values of several manifests (several runs' states) with one read of the store."""
        return (await self.load_with(manifests, (), namespace))[0]

    async def load_with(
        self, manifests: Mapping[K, Mapping[str, str]], also: Iterable[str], namespace: dict[str, Any] | None = None
    ) -> tuple[dict[K, dict[str, Any]], dict[str, Blob]]:
        """Like ``load_many``, and read the blobs at the addresses ``also`` in the same round trip
        (left to decode when they are needed: a cell's outputs, settings and shown value)."""
        extra = set(also)
        found = await self.store.get_blobs({h for m in manifests.values() for h in m.values()} | extra, self.secret)
        others = {h: found[h] for h in extra if h in found}
        wanted = {h for m in manifests.values() for h in m.values()}
        found = {h: blob for h, blob in found.items() if h in wanted}
        missing = sorted({name for m in manifests.values() for name, address in m.items() if address not in found})
        if missing:
            raise StoreError(
                f"The store lacks the stored values of {missing[:5]}; it was pruned or edited "
                "outside durable_nb. Fork from another checkpoint to go on."
            )
        self._stored.update(found)
        lists = await self._load_lists([found[h] for h in found if codec.is_list(h)])
        plain = {
            h: codec.decode(blob, self.secret) for h, blob in found.items() if h not in lists and not codec.is_group(h)
        }
        for address, value in plain.items():
            self.lists.remember_whole(address, value, found[address].size)
        plain.update(lists)
        # The values a group that fails to load is tried again beside (see _load_groups): a formula
        # model evaluates its formula again while unpickled, and it may name what its cell made.
        scope = {name: plain[h] for m in manifests.values() for name, h in m.items() if h in plain}
        groups = await self._load_groups([found[h] for h in found if codec.is_group(h)], namespace, scope)
        loaded = {
            key: {
                name: groups[value_hash][name] if value_hash in groups else plain[value_hash]
                for name, value_hash in manifest.items()
            }
            for key, manifest in manifests.items()
        }
        return loaded, others

    def decode(self, blob: Blob) -> Any:
        """Decode one plain blob read earlier (``load_with``), checking its signature."""
        self._stored.add(blob.hash)
        return codec.decode(blob, self.secret)

    async def _load_lists(self, blobs: list[Blob]) -> dict[str, list[Any]]:
        """Assemble lists stored in chunks; a chunk may itself be such a list (a map's results, extended)."""
        opened: dict[str, list[codec.ListChunk]] = {}
        decoded: dict[str, Any] = {}
        sizes: dict[str, int] = {}
        pending = blobs
        while pending:
            opened.update((blob.hash, codec.open_list(blob, self.secret)) for blob in pending)
            wanted = {c.address for blob in pending for c in opened[blob.hash]} - opened.keys() - decoded.keys()
            found = await self._parts(wanted, "part(s) of a stored list")
            self._stored.update(found)
            pending = [blob for address, blob in found.items() if codec.is_list(address)]
            decoded.update((a, codec.decode(blob, self.secret)) for a, blob in found.items() if not codec.is_list(a))
            sizes.update((a, blob.size) for a, blob in found.items())
        self.lists.remember_chunks(opened, sizes)
        assembled: dict[str, list[Any]] = {}

        def assemble(address: str) -> list[Any]:
            if address not in assembled:
                items: list[Any] = []
                for chunk in opened[address]:
                    part = assemble(chunk.address) if chunk.address in opened else decoded[chunk.address]
                    if chunk.single:
                        items.append(part)
                    elif isinstance(part, list) and len(part) == chunk.count:
                        items.extend(part)
                    else:
                        raise TamperedValueError(
                            f"A part of stored list {address[:14]}… is not the {chunk.count} items it should be; "
                            "the store was modified outside durable_nb. Fork from an earlier checkpoint."
                        )
                assembled[address] = items
            return assembled[address]

        return {blob.hash: assemble(blob.hash) for blob in blobs}

    async def _parts(self, wanted: set[str], what: str) -> dict[str, Blob]:
        """Read the parts of stored values; raise StoreError naming ``what`` if any is missing."""
        found = await self.store.get_blobs(wanted, self.secret) if wanted else {}
        lacking = sorted(wanted - found.keys())
        if lacking:
            raise StoreError(
                f"The store lacks {len(lacking)} {what} (e.g. {lacking[0][:14]}…); "
                "it was pruned or edited outside durable_nb. Fork from another checkpoint to go on."
            )
        return found

    async def _load_groups(
        self, blobs: list[Blob], namespace: dict[str, Any] | None, scope: dict[str, Any]
    ) -> dict[str, dict[str, Any]]:
        """Unpickle each group of variables (``scope``: the values loaded with them, by name)."""
        opened = {blob.hash: codec.open_group(blob, self.secret) for blob in blobs}
        wanted = {part.address for group in opened.values() for part in group.parts}
        parts = await self._parts(wanted, "array buffer(s) of stored variables")
        contents = {address: codec.open_raw(part) for address, part in parts.items()}
        self._stored.update(parts)
        loaded: dict[str, dict[str, Any]] = {}
        taken: set[str] = set()
        errors: dict[str, Exception] = {}
        pending, placing = list(opened), False
        with restoring_into(namespace):
            while pending:
                failed = []
                for address in pending:
                    group = opened[address]
                    buffers = []
                    for part in group.parts:
                        buffers.append(_buffer(contents[part.address], part.readonly, part.address in taken))
                        if not part.readonly:
                            taken.add(part.address)
                    try:
                        with _visible(namespace if placing else None, scope):
                            values = unpickle(group.stream, buffers)
                    except Exception as error:  # noqa: BLE001 - raised below unless a retry loads it
                        errors.setdefault(address, error)
                        failed.append(address)
                        continue
                    loaded[address] = dict(zip(group.names, [values] if len(group.names) == 1 else values, strict=True))
                    scope.update(loaded[address])
                if len(failed) == len(pending) and (placing or namespace is None):
                    raise errors[failed[0]]  # nothing more loads: the first error is the group's own
                # A value that unpickles by running code (statsmodels evaluates a model's formula
                # again) may need names of the same cell, not placed yet: it is tried again with
                # the values loaded so far visible in the namespace, as they were when it was made.
                pending, placing = failed, True
        return loaded

    async def load_one(self, value_hash: str) -> Any:
        """Load one value by its address."""
        found = await self.store.get_blobs([value_hash], self.secret)
        if value_hash not in found:
            raise StoreError(f"The store lacks the stored value {value_hash[:14]}…; it was pruned or edited.")
        self._stored.add(value_hash)
        if codec.is_list(value_hash):
            return (await self._load_lists([found[value_hash]]))[value_hash]
        return codec.decode(found[value_hash], self.secret)
