"""The embedded SQLite store: one file, one connection per process and file.

Each store operation is one function of a ``sqlite3`` connection, run whole under the
store's lock, so a transaction never interleaves with another thread's. Writers open
IMMEDIATE transactions so that two processes never both read a run row and then both write
it; ``busy_timeout`` makes a writer wait for another process's write lock instead of failing.
Where the call runs (the calling thread, a worker thread) is the driver's choice: see
``offload``.
"""

from __future__ import annotations

import atexit
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .. import _tally as tally
from ..errors import InvalidInput, StoreNotFound, StoreUnavailable
from ..model import (
    Blob,
    Commit,
    CommitResult,
    NewRun,
    RunRecord,
    WriteRow,
)
from . import sqlite_ops
from .blob_files import FILE_BYTES, BlobFolder, FileVanished
from .dialect import SQLITE
from .failures import operation_name, store_failed
from .offload import offload
from .sql_store import SQLStore
from .sqlite_schema import check_schema, ensure_schema

if TYPE_CHECKING:
    from ..model import PruneReport

__all__ = ["SQLiteStore"]

T = TypeVar("T")
BUSY_TIMEOUT_MS = 60_000
_DURABILITY = {"full": "FULL", "process": "NORMAL"}
# How many value addresses a store remembers having stored (see SQLiteStore._held).
_HELD_VALUES = 4096
_open_stores: weakref.WeakSet[SQLiteStore] = weakref.WeakSet()


class SQLiteStore(SQLStore):
    """A store in one SQLite file (WAL, ``synchronous=FULL`` unless durability="process"),
    with values of 4 MB or more as files in the folder ``<file>-blobs`` beside it."""

    def __init__(self, url: str, path: str, durability: str = "full", *, create: bool = True) -> None:
        if durability not in _DURABILITY:
            raise InvalidInput(f"durability must be 'full' or 'process', not {durability!r}.")
        self.url = url
        self.path = path
        self.durability = durability
        self.creates = create
        self._conn: sqlite3.Connection | None = None
        # Whoever holds it uses the connection: one operation (one transaction) at a time.
        self._lock = threading.Lock()
        self._closed = False
        # Set once an operation failed: closing then could write to files that can no longer be written.
        self._failed = False
        self.blob_folder = None if path == ":memory:" else BlobFolder(Path(f"{path}-blobs"), durability == "full")
        # Addresses of the small values this process's blocking commits stored: a commit holding
        # one again (a step's checkpoint holds the values its tasks just wrote) checks that the
        # store still holds it, in the statement that writes the commit, instead of writing it.
        self._held: dict[str, None] = {}

    _sql = sqlite_ops
    _dialect = SQLITE

    def __repr__(self) -> str:
        return f"SQLiteStore({self.url!r}, durability={self.durability!r})"

    # -- connection ---------------------------------------------------------------

    def _connect_sqlite(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = None
        try:
            if self.path != ":memory:":
                path = Path(self.path)
                if not self.creates and not path.exists():
                    raise StoreNotFound(os.path.abspath(self.path), "there is no such file")
                if not path.parent.exists():
                    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                if not path.exists():
                    # Create the file ourselves so it is private (0600) from its first byte.
                    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            # Refuse foreign or newer stores before any pragma can change the file.
            version = check_schema(conn, self.path)
            if version == 0 and not self.creates and self.path != ":memory:":
                raise StoreNotFound(os.path.abspath(self.path), "the file holds no durable_nb store")
            if self.path != ":memory:":
                conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={_DURABILITY[self.durability]}")
            ensure_schema(conn, self.path, version)
        except (sqlite3.DatabaseError, OSError) as exc:
            if conn is not None:
                conn.close()
            raise StoreUnavailable(
                f"Cannot open the SQLite store {self.path}: {exc}. Check that the path is a "
                "durable_nb store (or a new file) in a folder you can write to."
            ) from exc
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        return conn

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run one operation on the connection (opened on first use), holding the lock."""
        with self._lock:
            if self._closed:
                raise StoreUnavailable(f"{self!r} is closed; open a new one with durable_nb.connect().")
            if self._conn is None:
                self._conn = self._connect_sqlite()
                _open_stores.add(self)
            try:
                return fn(self._conn, *args)
            except (sqlite3.Error, OSError) as error:
                # Rolled back by the operation's transaction: tell what failed, keep the driver's error.
                self._failed = True
                raise store_failed(self.path, operation_name(fn.__name__), error) from error

    def _run(self, fn: Callable[..., T], *args: Any) -> Awaitable[T]:
        # The driver's awaitable itself, not a coroutine around it: one frame fewer per operation.
        return offload(partial(self._call, fn, *args))

    def commit_now(self, commit: Commit) -> CommitResult | None:
        """Write a commit as ``commit`` does, blocking this thread, which runs no event loop
        (nothing would wait meanwhile); None for a commit holding values kept as files, which
        only ``commit`` writes."""
        # A LangGraph step's put and put_writes, from the graph's worker threads: no coroutine.
        blobs = commit.blobs
        if self._has_large(blobs):
            return None
        result = self._call(sqlite_ops._commit, commit, time.time(), self.url, self._held)
        if blobs:
            self._stored(blobs)
        tally.committed(commit)
        return result

    def put_step(self, seen: RunRecord, row: tuple[Any, ...], blobs: list[Blob]) -> RunRecord | None:
        """Write a LangGraph step's checkpoint row (its ``sqlite_ops.STEP_COLUMNS`` after run_id, seq
        and created_at) as the next of the run whose row is ``seen``, with its values, blocking this
        thread; return the run row after, or None (nothing written: ``commit_now`` writes it)."""
        # The saver's own path: the row as it builds it, no Commit to lay out and read back. A
        # server's tally counts commits: its steps take commit_now.
        if self._has_large(blobs) or tally.current.get() is not None:
            return None
        run = self._call(sqlite_ops._put_step, seen, row, blobs, time.time(), self._held)
        if run is not None and blobs:
            self._stored(blobs)
        return run

    def store_writes_now(self, run_id: str, writes: list[WriteRow], blobs: list[Blob]) -> bool:
        """Store pending writes of a run (and their values) alone, blocking this thread; tell whether
        it did (False: ``commit_now`` stores them). Raise RunNotFound when the run is gone."""
        if self._has_large(blobs) or tally.current.get() is not None:
            return False
        self._call(sqlite_ops._store_writes, run_id, writes, blobs, time.time(), self.url, self._held)
        if blobs:
            self._stored(blobs)
        return True

    def _stored(self, blobs: list[Blob]) -> None:
        """Remember the addresses of values a commit stored (see ``_held``)."""
        held = self._held
        if len(held) >= _HELD_VALUES:
            held.clear()  # a bound seldom reached: a thread's step stores the values its tasks wrote
        for blob in blobs:
            held[blob.hash] = None

    # -- values kept as files ---------------------------------------------------------

    async def _off_loop(self, fn: Callable[..., T], *args: Any) -> T:
        # File work of a large value, outside the connection's lock; where it runs is the driver's choice.
        return await offload(partial(fn, *args))

    def _has_large(self, blobs: list[Blob]) -> bool:
        if self.blob_folder is None:
            return False
        for blob in blobs:  # a loop, not a generator: on every commit's path
            if len(blob.data) >= FILE_BYTES:
                return True
        return False

    async def _with_files(self, blobs: list[Blob]) -> list[Blob]:
        folder = self.blob_folder
        assert folder is not None
        return [await self._off_loop(folder.write, b) if b.size >= FILE_BYTES else b for b in blobs]

    async def _writing_files(self, blobs: list[Blob], write: Callable[[list[Blob]], Awaitable[T]]) -> T:
        # Large values go to their files first; a file pruned before its commit took the
        # write lock is written again, a bounded number of times.
        for attempt in range(1, sqlite_ops.FILE_ATTEMPTS + 1):
            try:
                return await write(await self._with_files(blobs))
            except FileVanished:
                if attempt == sqlite_ops.FILE_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    async def create_run(self, new: NewRun) -> tuple[RunRecord, bool]:
        """Create a run with its first checkpoints and events, or return the keyed original."""
        if not self._has_large(new.blobs):
            return await super().create_run(new)
        create = super().create_run
        return await self._writing_files(new.blobs, lambda blobs: create(replace(new, blobs=blobs)))

    async def _commit_with_files(self, commit: Commit) -> CommitResult:
        # A commit holding large values: SQLStore.commit with those values first as files.
        write = super()._commit_rows
        return await self._writing_files(commit.blobs, lambda blobs: write(replace(commit, blobs=blobs)))

    async def get_blobs(self, hashes: Iterable[str], key: bytes | None = None) -> dict[str, Blob]:
        """Return the blobs stored under the given addresses (missing ones left out)."""
        wanted = list(dict.fromkeys(hashes))
        if not wanted:
            return {}
        found, in_files = await self._run(sqlite_ops._get_blobs, wanted, key)
        folder = self.blob_folder
        for value_hash, codec, size, seal in in_files if folder is not None else []:
            blob = await self._off_loop(folder.read, value_hash, codec, size, key, seal)
            if blob is not None:  # a missing file is a missing value: the loader says so
                found[value_hash] = blob
        return found

    async def prune(self, older_than: float) -> PruneReport:
        """Delete old checkpoints and events of finished runs, unreferenced values and their files."""
        report = await super().prune(older_than)
        if self.blob_folder is not None:
            files = [str(f) for f in self.blob_folder.files()]
            if files:
                await self._run(sqlite_ops._delete_unreferenced, files, time.time() - sqlite_ops.STALE_WRITE_SECONDS)
        return report

    async def close(self) -> None:
        """Close the connection; later calls raise StoreUnavailable."""
        await offload(self.close_now)

    def close_now(self, wait: float = -1) -> None:
        """Close the connection on this thread; later calls raise StoreUnavailable."""
        # Under the lock: an operation of another thread finishes with the connection first
        # (``wait`` seconds at most; -1: as long as it takes).
        if not self._lock.acquire(timeout=wait):
            return
        try:
            self._closed = True
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()
        finally:
            self._lock.release()

    def close_at_exit(self) -> None:
        """Close at interpreter exit, unless an operation still holds the connection after 5 s.

        A store that failed a write (read-only, immutable, I/O errors) is left for the system to
        close: SQLite's closing checkpoint would write its shared-memory file, and a write to a
        mapped file that became read-only kills the process (SIGBUS). The next opener recovers the WAL.
        """
        if self._failed:
            return
        self.close_now(wait=5)


@atexit.register
def _close_open_stores() -> None:
    for store in list(_open_stores):
        store.close_at_exit()
