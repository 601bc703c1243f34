"""Persistence: the store protocol, its backends, and ``connect()`` to pick one by URL."""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from .._lazy import lazy_names
from ..errors import InvalidInput, StoreUnavailable

if TYPE_CHECKING:
    from .protocol import Conflict, Store
    from .sql_store import SQLStore
    from .url import DEFAULT_URL, ENV_VAR

# Imported on first use: ``import durable_nb`` (which installs the store's offload policy) must
# not pay for the records and the protocol of a store it may never open.
_LAZY = {"Conflict": ".protocol", "Store": ".protocol", "DEFAULT_URL": ".url", "ENV_VAR": ".url"}

DURABILITY_LEVELS = ("full", "process")

__all__ = ["DEFAULT_URL", "ENV_VAR", "Conflict", "Store", "connect", "disconnect", "resolve_store"]

_stores: dict[tuple[int, str, str], SQLStore] = {}
_lock = threading.Lock()


def connect(url: str | os.PathLike[str] | None = None, *, durability: str = "full", create: bool = True) -> Store:
    """Return the store at ``url`` (default: $DURABLE_NB_STORE, else sqlite:///.durable_nb/runs.db).

    Stores are shared per process and URL; the connection opens on first use.
    ``durability="process"`` trades power-loss safety for speed (SQLite synchronous=NORMAL).
    ``create=False`` is for callers that only read or act on stored runs: a store that does not
    exist yet raises StoreNotFound when first used, and nothing is created (a mistyped URL must
    not leave an empty store behind).

    Args:
        url: ``sqlite:///relative.db``, ``sqlite:////absolute.db``, a path, or
            ``postgresql://user@host:5432/db?schema=…&pool_max=…`` (the postgres extra).
        durability: ``"full"`` (a commit survives a power cut) or ``"process"`` (a killed process).
        create: False to refuse creating a store that does not exist.

    Returns:
        The store, shared by every caller of this process with the same URL.

    Raises:
        InvalidInput: ``durability`` is neither level.
        StoreUnavailable: The URL is malformed or its driver is not installed.

    Example:
        >>> store = dnb.connect("sqlite:///runs.db")
        >>> nightly = dnb.Workflow("nightly", store=store)
    """
    if durability not in DURABILITY_LEVELS:
        raise InvalidInput(
            f"durability must be 'full' (survives power loss) or 'process' (survives a crash of this "
            f"process, faster), not {durability!r}."
        )
    from .url import parse_url, resolve_url

    text = resolve_url(url)
    parsed = parse_url(text)
    key_path = os.path.abspath(parsed.path) if parsed.path and not parsed.is_memory else text
    # The pid is part of the key: a forked child must not reuse its parent's connection thread.
    key = (os.getpid(), key_path, durability)
    with _lock:
        store = _stores.get(key)
        if store is not None and not getattr(store, "_closed", False) and not parsed.is_memory:
            # One store object per URL: once anyone in this process may create it, so may it.
            store.creates = store.creates or create
            return store
        store = _open_backend(parsed.scheme, text, parsed.path, durability, create)
        if not parsed.is_memory:
            _stores[key] = store
        return store


def disconnect(url: str | os.PathLike[str] | None = None) -> None:
    """Close and forget this process's shared stores at ``url`` (all of them when None)."""
    from .url import resolve_url

    text = None if url is None else resolve_url(url)
    with _lock:
        chosen = [k for k, s in _stores.items() if text is None or getattr(s, "url", None) == text]
        stores = [_stores.pop(k) for k in chosen]
    # Closing is one blocking call on this thread: no event loop is needed, so the store
    # keeps clear of the sync driver above it.
    for store in stores:
        store.close_now()


def _open_backend(scheme: str, url: str, path: str | None, durability: str, create: bool) -> SQLStore:
    if scheme == "sqlite":
        from .sqlite import SQLiteStore

        assert path is not None
        return SQLiteStore(url, path, durability, create=create)
    if scheme == "postgresql":
        from .postgres import PostgresStore

        return PostgresStore(url, durability, create=create)
    raise StoreUnavailable(f"No store backend for {scheme!r} URLs; use sqlite:/// or postgresql://.")


def resolve_store(store: Any, *, existing: bool = False) -> Store:
    """Accept a store, a URL or None (the default store) and return a store.

    ``existing=True`` is for calls that only read or act on stored runs: a URL given to them must
    name a store that exists (StoreNotFound otherwise, nothing created); the default store is
    created on first use, as ever.
    """
    from .protocol import Store

    if store is None:
        return connect()
    if isinstance(store, (str, os.PathLike)):
        return connect(store, create=not existing)
    if isinstance(store, Store):
        return store
    raise InvalidInput(
        f"store= takes a store URL (sqlite:///path/to/runs.db, postgresql://user@host/db), a store "
        f"from durable_nb.connect(), or None for the default store; not {type(store).__name__}: {store!r}."
    )


__getattr__, __dir__ = lazy_names(__name__, _LAZY)
