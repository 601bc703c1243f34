"""The stores a Jupyter server serves, each known to the browser by an opaque key.

A browser names a store by ``store_key(url)`` (16 hex digits of a SHA-256 of the resolved URL),
never by its URL or path, so that no request can make the server open a file or a database of
its choosing: the server serves only stores it found itself (its configuration, the default
store, and the stores its own kernels attached to). The kernel side imports ``store_key`` and
``resolved_url`` alone, so this module imports nothing heavy.
"""

from __future__ import annotations

import hashlib
import os
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import DurableError
from ..store.url import parse_url, resolve_url

__all__ = ["StoreNotServed", "resolved_url", "store_key", "store_label"]


class StoreNotServed(DurableError, LookupError):
    """A store key this Jupyter server does not serve."""


def resolved_url(url: str | os.PathLike[str] | None) -> str:
    """Return ``url`` (None: $DURABLE_NB_STORE, else the default) with a SQLite path made absolute."""
    text = resolve_url(url)
    parsed = parse_url(text)
    if parsed.scheme == "sqlite" and parsed.path is not None and not parsed.is_memory:
        # A kernel and the server run in different folders: one relative path names two files.
        return "sqlite:///" + os.path.abspath(parsed.path)
    return text


def store_key(url: str | os.PathLike[str] | None) -> str:
    """Return the opaque key of a store: the first 16 hex digits of SHA-256 of its resolved URL."""
    return hashlib.sha256(resolved_url(url).encode("utf-8")).hexdigest()[:16]


def store_label(url: str) -> str:
    """Return a store URL fit to show: without a password, in the address or in its query."""
    if not url.startswith(("postgresql", "postgres")):
        return url
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.split(':', 1)[0]}@{host}"
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "password"])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
