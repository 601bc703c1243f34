"""Lists that grow by appending, stored in chunks: a commit writes the new items, not the list."""

from __future__ import annotations

from typing import Any

from ...model import Blob
from ...store import codec

__all__ = ["AppendedLists"]

# A list shorter than this is stored whole when it grows: chunks would cost more than they save.
APPEND_FROM = 16
# Chunks are merged by writing their items again only up to this many bytes; larger ones are
# joined under a small node that names both, so no commit rewrites more than this.
MERGE_BYTES = 64 << 10


class _Part:
    """A run of a list's items in the plan of its chunks: stored already, to write, or a node of two."""

    start: int
    count: int
    size: int | None  # bytes of its items, where known
    address: str | None
    children: tuple[_Part, _Part] | None

    __slots__ = ("address", "children", "count", "size", "start")

    def __init__(
        self,
        start: int,
        count: int,
        size: int | None,
        address: str | None = None,
        children: tuple[_Part, _Part] | None = None,
    ) -> None:
        self.start = start
        self.count = count
        self.size = size
        self.address = address
        self.children = children

    def items_only(self) -> bool:
        """Tell whether the part is items in one chunk (not a node or a stored list of chunks)."""
        return self.children is None and self.size is not None and not codec.is_list(self.address or "")


class AppendedLists:
    """Knows how the lists a run stored are chunked, and stores a longer list by appending to one."""

    def __init__(self, secret: bytes) -> None:
        self.secret = secret
        # The chunks of each list that may be appended to, by address (a list stored whole is its
        # own one chunk), and the bytes of the chunks, where known.
        self._chunks: dict[str, list[codec.ListChunk]] = {}
        self._sizes: dict[str, int] = {}

    def remember_whole(self, address: str, value: Any, size: int | None) -> None:
        """Note a value stored whole under ``address``: a list may later be appended to."""
        if type(value) is list and len(value) >= APPEND_FROM:
            self._chunks[address] = [codec.ListChunk(address, len(value))]
            if size is not None:
                self._sizes[address] = size

    def remember_chunks(self, chunks: dict[str, list[codec.ListChunk]], sizes: dict[str, int]) -> None:
        """Note lists loaded from the store (their chunks by address) and the bytes of their parts."""
        self._chunks.update(chunks)
        self._sizes.update(sizes)

    def of_items(self, addresses: list[str]) -> Blob:
        """Return the blob of a list whose items are stored values (a map's results, as they finished)."""
        chunks = [codec.ListChunk(a, 1, single=True) for a in addresses]
        root = codec.encode_list(chunks, self.secret)
        self._chunks[root.hash] = chunks
        return root

    def append(self, name: str, value: Any, address: str | None) -> tuple[str, list[Blob]] | None:
        """Store ``value`` as the list stored at ``address`` plus its new items.

        Returns the new address and the blobs to write, or None when ``value`` does not extend
        that list exactly (then it is stored whole).
        """
        chunks = self._chunks.get(address) if address is not None else None
        if chunks is None or address is None or type(value) is not list:
            return None
        if any(c.single for c in chunks):
            # A list of stored items (a map's results) is extended as one part, so that its
            # root does not name every item again at each append.
            chunks = [codec.ListChunk(address, sum(c.count for c in chunks))]
        known = sum(c.count for c in chunks)
        # The items stored before must still be what they were: a node may have changed one in
        # place. Encoding them again costs time but no bytes; any difference stores the list whole.
        if len(value) < known or not self._holds(chunks, value, 0):
            return None
        if len(value) == known:
            return address, []  # returned as it was: nothing to write
        new = codec.encode(value[known:], self.secret, name)
        parts = self._parts(chunks)
        parts.append(_Part(known, len(value) - known, new.size))
        # A binary counter: the last two parts merge while the earlier is no longer than the
        # later, so a list has about log2(length) parts and an item is written about log2 times.
        while len(parts) > 1 and parts[-2].count <= parts[-1].count:
            first, second = parts[-2:]
            if first.items_only() and second.items_only() and first.size + second.size <= MERGE_BYTES:  # type: ignore[operator]
                merged = _Part(first.start, first.count + second.count, first.size + second.size)  # type: ignore[operator]
            else:
                merged = _Part(first.start, first.count + second.count, None, children=(first, second))
            parts[-2:] = [merged]
        blobs: list[Blob] = []
        written = {(known, len(value) - known): new}
        root_chunks = [self._write(part, value, name, written, blobs) for part in parts]
        root = codec.encode_list(root_chunks, self.secret)
        self._chunks[root.hash] = root_chunks
        if codec.is_list(address) and address not in {c.address for c in root_chunks}:
            self._chunks.pop(address, None)  # replaced: the new root is the one appended to next
        return root.hash, [*blobs, root]

    def _parts(self, chunks: list[codec.ListChunk]) -> list[_Part]:
        parts, start = [], 0
        for chunk in chunks:
            size = None if codec.is_list(chunk.address) else self._sizes.get(chunk.address)
            parts.append(_Part(start, chunk.count, size, address=chunk.address))
            start += chunk.count
        return parts

    def _write(
        self, part: _Part, value: list[Any], name: str, written: dict[tuple[int, int], Blob], blobs: list[Blob]
    ) -> codec.ListChunk:
        """Make the chunk of a planned part, adding the blobs it needs to ``blobs``."""
        if part.address is not None:
            return codec.ListChunk(part.address, part.count)
        if part.children is not None:
            chunks = [self._write(child, value, name, written, blobs) for child in part.children]
            blob = codec.encode_list(chunks, self.secret)
            self._chunks[blob.hash] = chunks
        else:
            blob = written.get((part.start, part.count)) or codec.encode(
                value[part.start : part.start + part.count], self.secret, name
            )
            self._sizes[blob.hash] = blob.size
        blobs.append(blob)
        return codec.ListChunk(blob.hash, part.count)

    def _holds(self, chunks: list[codec.ListChunk], value: list[Any], start: int) -> bool:
        """Tell whether ``value`` from ``start`` on begins with exactly the items of ``chunks``."""
        for chunk in chunks:
            if chunk.single:
                if codec.encode(value[start], self.secret).hash != chunk.address:
                    return False
            elif codec.is_list(chunk.address):
                inner = self._chunks.get(chunk.address)
                if inner is None or not self._holds(inner, value, start):
                    return False
            elif codec.encode(value[start : start + chunk.count], self.secret).hash != chunk.address:
                return False
            start += chunk.count
        return True
