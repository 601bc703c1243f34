"""Large values of a SQLite store, kept as files in a folder beside the database.

SQLite in WAL mode writes every page twice (into the log, then into the database at the
next checkpoint) and checksums each frame: a 100 MB value would cost three times pickling it
and writing it once. So a value of ``FILE_BYTES`` or more is written once, to a file named by
its address, and its row in ``blobs`` keeps the size with empty data.

Order makes it safe: the file is complete and (under ``synchronous=FULL``) on disk before
the transaction that refers to it begins, and that transaction checks, holding the write
lock, that the file is still there. ``prune`` deletes a file only under the same lock and
only when no row refers to it, so a file a commit is about to use is never taken away.
A file whose commit never happened (a crash, a conflict) is an orphan that ``prune`` removes.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import StoreError, StoreFailed, TamperedValueError
from ..model import Blob
from ..model.records import quick_init
from .codec import address_hasher

__all__ = ["FILE_BYTES", "BlobFolder", "FileBlob", "FileVanished", "read_hashed"]

FILE_BYTES = 4 << 20
_CHUNK_BYTES = 8 << 20
# Only names this module writes are ever opened: an address edited in the database cannot
# point the store at another file.
# The kinds of addresses a value can have (their prefix before ``-``), and a digest's characters.
_PREFIXES = frozenset({"p", "j", "g", "r", "l", "js", "ls"})
_HEX = frozenset("0123456789abcdef")


def _is_address(text: str) -> bool:
    """True for ``<kind>-<64 hex digits>``, an address the store names a file by."""
    kind, dash, digest = text.partition("-")
    return bool(dash) and kind in _PREFIXES and len(digest) == 64 and _HEX.issuperset(digest)


_hashing: concurrent.futures.ThreadPoolExecutor | None = None
_hashing_lock = threading.Lock()


class FileVanished(StoreError):
    """A value file a commit refers to was removed before the commit could take the lock."""

    def __init__(self, path: str) -> None:
        super().__init__(
            f"The value file {path} was deleted before the commit that needed it, again and again; "
            "something outside durable_nb is deleting files in that folder. Stop it and retry."
        )


@quick_init
@dataclass(repr=False, eq=False, slots=True, init=False)  # frozen, compared and shown as Blob is
class FileBlob(Blob):
    """A blob whose bytes are in the blob folder: its row keeps the size and empty data."""

    path: str = ""
    stored_size: int = 0

    @property
    def size(self) -> int:
        return self.stored_size


def _hash_pool() -> concurrent.futures.ThreadPoolExecutor:
    global _hashing
    with _hashing_lock:
        if _hashing is None:
            _hashing = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="durable-nb-hash")
        return _hashing


def read_hashed(
    read_into: Callable[[memoryview], int],
    size: int,
    value_hash: str,
    codec: str,
    key: bytes | None,
    seal: str | None = None,
) -> Blob:
    """Read ``size`` bytes in chunks with ``read_into(view) -> count``, hashing each chunk on
    another thread while the next one is read (the digest rides in ``Blob.read_digest``)."""
    hasher = None if key is None else address_hasher(value_hash, key)
    data = bytearray(size)
    view = memoryview(data)
    hashed: concurrent.futures.Future[None] | None = None
    offset = 0
    while offset < size:
        count = read_into(view[offset : offset + _CHUNK_BYTES])
        if not count:
            raise TamperedValueError(
                f"Stored value {value_hash[:14]}… has {offset} of its {size} bytes, so it was not "
                "loaded: it was truncated or edited outside durable_nb. Fork from an earlier checkpoint."
            )
        if hasher is not None:
            if hashed is not None:
                hashed.result()
            hashed = _hash_pool().submit(hasher.update, view[offset : offset + count])
        offset += count
    if hashed is not None:
        hashed.result()
    digest = None if key is None or hasher is None else (key, str(hasher.hexdigest()))
    # A bytearray: pickle and json load it as they would bytes, without another full copy.
    return Blob(value_hash, codec, data, read_digest=digest, seal=seal)  # type: ignore[arg-type]


class BlobFolder:
    """The folder of value files beside one SQLite database."""

    def __init__(self, folder: Path, sync: bool) -> None:
        self.folder = folder
        self.sync = sync

    def path(self, value_hash: str) -> Path | None:
        """Return the file of an address, or None for an address this store never names a file."""
        return self.folder / value_hash if _is_address(value_hash) else None

    def write(self, blob: Blob) -> FileBlob:
        """Write a blob's bytes to its file (atomically, durably when ``sync``); return the row's stand-in."""
        target = self.path(blob.hash)
        if target is None:
            raise ValueError(f"{blob.hash[:14]}… is not a value address")
        stand_in = FileBlob(blob.hash, blob.codec, b"", path=str(target), stored_size=blob.size)
        try:
            if target.stat().st_size == blob.size:
                return stand_in  # the same value, written before (the commit checks it is still there)
        except OSError:
            pass  # not there (or no folder yet): write it
        temporary = self.folder / f".{blob.hash}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                view = memoryview(blob.data)
                while view:
                    view = view[os.write(handle, view) :]
                if self.sync:
                    os.fsync(handle)
            finally:
                os.close(handle)
            os.replace(temporary, target)
            if self.sync:
                self._sync_folder()
        except OSError as error:
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise StoreFailed(
                f"Cannot write the value file {target}: {error.strerror or error}. Nothing was committed; "
                f"free some disk space or make {self.folder} writable, then run again."
            ) from error
        return stand_in

    def read(self, value_hash: str, codec: str, size: int, key: bytes | None, seal: str | None = None) -> Blob | None:
        """Return the blob stored in a file, or None when the file is missing."""
        target = self.path(value_hash)
        if target is None:
            return None
        try:
            with open(target, "rb", buffering=0) as handle:
                return read_hashed(handle.readinto, size, value_hash, codec, key, seal)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise StoreFailed(
                f"Cannot read the value file {target}: {error.strerror or error}. "
                f"Check that {self.folder} is readable by this user."
            ) from error

    def files(self) -> list[Path]:
        """Return every value file and leftover temporary file in the folder."""
        try:
            return [entry for entry in self.folder.iterdir() if entry.is_file()]
        except FileNotFoundError:
            return []

    @staticmethod
    def older_than(path: Path, cutoff: float) -> bool:
        """Tell whether a file was last written before ``cutoff`` (a file gone since counts as no)."""
        try:
            return path.stat().st_mtime < cutoff
        except FileNotFoundError:
            return False

    def _sync_folder(self) -> None:
        # The rename is durable only once the folder itself is on disk.
        handle = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)
