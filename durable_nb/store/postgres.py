"""The PostgreSQL store, on psycopg 3, for many processes and machines.

Each store operation is one blocking function run with a connection from one bounded pool,
as the SQLite store runs its operations on its connection. The store is driven from many
event loops and threads, and a connection of an async driver belongs to the loop that
opened it; blocking connections serve them all. Where an operation runs (the calling thread,
a worker thread) is the driver's choice: see ``offload``.
"""

from __future__ import annotations

import math
import select
import threading
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .. import _tally as tally
from ..errors import InvalidInput, StoreFailed, StoreNotFound, StoreUnavailable
from ..model import (
    Commit,
    CommitResult,
)
from . import postgres_ops
from .dialect import POSTGRES
from .failures import WRITES, operation_name, store_failed
from .offload import offload
from .postgres_schema import MIGRATION_LOCK, ensure_schema, stored_version
from .sql_store import SQLStore

__all__ = ["PostgresStore"]

T = TypeVar("T")
_OUR_PARAMS = ("schema", "pool_min", "pool_max", "pool_timeout")
_COMMIT_ATTEMPTS = 3
# A read whose connection died (a restarted server, a terminated backend) is tried this often.
_READ_ATTEMPTS = 3
# How long an operation waits for a working pooled connection before it fails (?pool_timeout=).
_CONNECTION_WAIT_SECONDS = "30"


def _check_connection(conn: Any) -> None:
    """Check a pooled connection as it is handed out; raise if it no longer works.

    A connection that sat idle has nothing to read unless the server spoke meanwhile: a
    terminated backend's or a stopping server's last message, or the socket's end. Only then
    does the check cost a round trip (psycopg_pool's empty query); on the hot path, where one
    connection serves commit after commit, it costs one poll of the socket.
    """
    from psycopg_pool import ConnectionPool

    try:
        readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
    except Exception:  # noqa: BLE001 - a closed connection, or a socket select cannot watch
        readable = [True]
    if readable:
        ConnectionPool.check_connection(conn)


def _split(url: str) -> tuple[str, dict[str, str]]:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    ours = {k: query.pop(k) for k in _OUR_PARAMS if k in query}
    scheme = "postgresql" if parts.scheme.startswith("postgres") else parts.scheme
    return urlunsplit((scheme, parts.netloc, parts.path, urlencode(query), parts.fragment)), ours


def _option(options: dict[str, str], name: str, default: str, kind: type, least: float) -> float:
    """Return a numeric URL option, refusing text that is not a number of at least ``least``."""
    text = options.get(name, default)
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value < least:
        raise StoreUnavailable(
            f"?{name}= takes a {'whole ' if kind is int else ''}number of at least {least:g}, not {text!r}."
        )
    return float(value)


def _shown(url: str) -> str:
    """Return the URL as messages show it: without its password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class PostgresStore(SQLStore):
    """A store in a PostgreSQL database (optionally one schema of it: ``?schema=name``)."""

    def __init__(self, url: str, durability: str = "full", *, create: bool = True) -> None:
        if durability not in ("full", "process"):
            raise InvalidInput(f"durability must be 'full' or 'process', not {durability!r}.")
        self.creates = create
        try:
            import psycopg  # noqa: F401
            import psycopg_pool  # noqa: F401
        except ImportError as error:
            raise StoreUnavailable(
                "The PostgreSQL store needs psycopg 3: pip install 'durable-nb[postgres]'."
            ) from error
        self.url = url
        self.durability = durability
        self.conninfo, options = _split(url)
        self.schema = options.get("schema")
        if self.schema is not None and not self.schema.replace("_", "").isalnum():
            raise StoreUnavailable(f"?schema= takes a plain name (letters, digits, _), not {self.schema!r}.")
        self.pool_min = int(_option(options, "pool_min", "1", int, 0))
        self.pool_max = int(_option(options, "pool_max", "4", int, max(1, self.pool_min)))
        self.pool_timeout = _option(options, "pool_timeout", _CONNECTION_WAIT_SECONDS, float, 0.001)
        self._pool: Any = None
        self._open_lock = threading.Lock()
        self._closed = False
        self.application_name = f"durable-nb:{self.schema or 'public'}"

    _sql = postgres_ops
    _dialect = POSTGRES

    def __repr__(self) -> str:
        return f"PostgresStore({_shown(self.url)!r}, durability={self.durability!r})"

    # -- connections ------------------------------------------------------------------------

    def _configure(self, conn: Any) -> None:
        conn.autocommit = True
        if self.schema is not None:
            conn.execute(f'SET search_path TO "{self.schema}"')
        if self.durability == "process":
            # The server keeps committed data across a crash of our process, but may lose the
            # last transactions on its own crash: the trade durability="process" asks for.
            conn.execute("SET synchronous_commit TO off")

    def _open(self) -> Any:
        from psycopg import OperationalError, connect
        from psycopg_pool import ConnectionPool

        try:
            with connect(self.conninfo, autocommit=True, connect_timeout=10) as conn:
                if not self.creates:
                    self._require_existing(conn)
                # CREATE SCHEMA IF NOT EXISTS is not safe against a concurrent twin: every process
                # that opens a new store takes the migration lock first.
                conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
                try:
                    if self.schema is not None:
                        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
                        conn.execute(f'SET search_path TO "{self.schema}"')
                    ensure_schema(conn, self.url)
                finally:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
        except OperationalError as error:
            raise StoreUnavailable(
                f"Cannot reach the PostgreSQL store {_shown(self.url)}: {str(error).strip()}. Check the URL, "
                "that the server runs and that this user may connect."
            ) from error
        return ConnectionPool(
            self.conninfo,
            min_size=self.pool_min,
            max_size=self.pool_max,
            configure=self._configure,
            # Named, so an operator (or a test) can find this store's sessions in pg_stat_activity.
            kwargs={"connect_timeout": 10, "application_name": self.application_name},
            check=_check_connection,
            open=True,
            name=f"durable-nb-{id(self)}",
        )

    def _require_existing(self, conn: Any) -> None:
        """Raise StoreNotFound unless the schema exists and holds durable_nb's tables (nothing is created)."""
        if self.schema is not None:
            if conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,)).fetchone() is None:
                raise StoreNotFound(_shown(self.url), f"the database has no schema {self.schema!r}")
            conn.execute(f'SET search_path TO "{self.schema}"')
        if stored_version(conn, self.url) == 0:
            raise StoreNotFound(_shown(self.url), "the database holds no durable_nb tables")

    def _pool_or_open(self) -> Any:
        if self._closed:
            raise StoreUnavailable(f"{self!r} is closed; open a new one with durable_nb.connect().")
        if self._pool is None:
            with self._open_lock:
                if self._pool is None:
                    self._pool = self._open()
        return self._pool

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run one operation with a pooled connection; a read that lost its connection is tried again."""
        from psycopg import Error, OperationalError
        from psycopg_pool import PoolTimeout

        attempts = 1 if fn.__name__ in WRITES else _READ_ATTEMPTS
        for attempt in range(1, attempts + 1):
            try:
                return self._call_once(fn, *args)
            except OperationalError as error:
                if attempt == attempts:
                    raise self._failed(fn, error, attempts) from error
            except PoolTimeout as error:
                # The pool already waited its timeout for a working connection: no retry.
                raise self._failed(fn, error, attempts) from error
            except Error as error:
                raise self._failed(fn, error, 1) from error
        raise AssertionError("unreachable")

    def _call_once(self, fn: Callable[..., T], *args: Any) -> T:
        pool = self._pool_or_open()
        with pool.connection(timeout=self.pool_timeout) as conn:
            return fn(conn, *args)

    def _failed(
        self, fn: Callable[..., Any], error: BaseException, attempts: int, *, reported: bool = False
    ) -> StoreFailed:
        return store_failed(_shown(self.url), operation_name(fn.__name__), error, attempts, reported=reported)

    def _run(self, fn: Callable[..., T], *args: Any) -> Awaitable[T]:
        # The driver's awaitable itself, not a coroutine around it: one frame fewer per operation.
        return offload(partial(self._call, fn, *args))

    def _run_once(self, fn: Callable[..., T], *args: Any) -> Awaitable[T]:
        return offload(partial(self._call_once, fn, *args))

    async def close(self) -> None:
        """Close the pool; later calls raise StoreUnavailable."""
        await offload(self.close_now)

    def close_now(self) -> None:
        """Close the pool on this thread; later calls raise StoreUnavailable."""
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    async def commit(self, commit: Commit) -> CommitResult:
        """Write a commit in one transaction; a lost connection is retried without writing twice."""
        from psycopg import Error, OperationalError
        from psycopg_pool import PoolTimeout

        for attempt in range(1, _COMMIT_ATTEMPTS + 1):
            try:
                result = await self._run_once(postgres_ops._commit, commit, time.time(), self.url)
                tally.committed(commit)
                return result
            except (OperationalError, PoolTimeout) as error:
                if attempt == _COMMIT_ATTEMPTS:
                    raise self._failed(postgres_ops._commit, error, _COMMIT_ATTEMPTS) from error
                # The connection died: the commit either landed whole or not at all.
                try:
                    landed = await self._run(postgres_ops._landed, commit)
                except StoreFailed as lost:  # counted once: as the read that failed
                    raise self._failed(postgres_ops._commit, lost.__cause__ or error, attempt, reported=True) from error
                if landed is not None:
                    tally.committed(commit)
                    return landed
            except Error as error:
                raise self._failed(postgres_ops._commit, error, 1) from error
        raise AssertionError("unreachable")
