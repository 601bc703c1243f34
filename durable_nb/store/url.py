"""Store URLs: which backend, and where its data lives."""

# Annotations evaluated, not strings: the named tuples below keep them as their fields' types.

import os
import string
from pathlib import Path

from .._tuples import Typed
from ..errors import InvalidInput, StoreUnavailable

__all__ = ["DEFAULT_URL", "ENV_VAR", "StoreURL", "parse_url", "resolve_url", "url_for_other_processes"]

ENV_VAR = "DURABLE_NB_STORE"
# Anything that starts like a URL scheme is a URL, never a file name (so "sqlite:/x.db" is refused).
_LETTERS = frozenset(string.ascii_letters)
_SCHEME_CHARS = _LETTERS | frozenset(string.digits + "+.-")


def _has_scheme(url: str) -> bool:
    """True if ``url`` starts with a URL scheme and its colon (a letter, then letters, digits, ``+.-``)."""
    scheme, colon, _ = url.partition(":")
    return bool(colon) and scheme[:1] in _LETTERS and _SCHEME_CHARS.issuperset(scheme)


DEFAULT_URL = "sqlite:///.durable_nb/runs.db"


class StoreURL(Typed):
    """A parsed store URL."""

    scheme: str
    raw: str
    path: str | None = None

    @property
    def is_memory(self) -> bool:
        return self.scheme == "sqlite" and self.path == ":memory:"


def resolve_url(url: str | os.PathLike[str] | None) -> str:
    """Return the URL to use: the given one, else $DURABLE_NB_STORE, else the default."""
    if url is None:
        url = os.environ.get(ENV_VAR) or DEFAULT_URL
    if not isinstance(url, str | os.PathLike) or not isinstance(os.fspath(url), str):
        raise InvalidInput(
            f"A store URL is text such as sqlite:///path/to/runs.db or postgresql://user@host/db, "
            f"not {type(url).__name__}: {url!r}."
        )
    return os.fspath(url)


def parse_url(url: str) -> StoreURL:
    """Parse ``sqlite:///relative.db``, ``sqlite:////absolute.db`` or ``postgresql://…``."""
    if url.startswith("sqlite://"):
        rest = url[len("sqlite://") :]
        if rest in ("/:memory:", ":memory:"):
            return StoreURL("sqlite", url, ":memory:")
        if rest in ("", "/"):
            # Never an in-memory store by accident: it would lose every run when the process ends.
            raise StoreUnavailable(
                f"Store URL {url!r} names no file. Write sqlite:///path/to/runs.db, or "
                "sqlite:///:memory: for a store that lives only as long as this process."
            )
        if not rest.startswith("/"):
            raise StoreUnavailable(
                f"Cannot read store URL {url!r}: a SQLite URL is sqlite:///relative/path.db "
                "or sqlite:////absolute/path.db (three slashes, then the path)."
            )
        path = rest[1:]
        # A fourth slash makes the path absolute, as in SQLAlchemy URLs.
        return StoreURL("sqlite", url, str(Path(path).expanduser()))
    if url.startswith(("postgresql://", "postgres://", "postgresql+")):
        return StoreURL("postgresql", url)
    if not _has_scheme(url) and url.endswith((".db", ".sqlite", ".sqlite3")):
        return StoreURL("sqlite", url, str(Path(url).expanduser()))
    raise StoreUnavailable(
        f"Unknown store URL {url!r}. Use sqlite:///path/to/runs.db for the embedded store "
        "or postgresql://user@host/db for PostgreSQL (set it with durable_nb.connect(url) "
        f"or the {ENV_VAR} environment variable)."
    )


def url_for_other_processes(url: str) -> str | None:
    """The URL another process (a kernel, a worker) opens for the same store: a SQLite path made absolute,
    since that process may work in another folder; None for an in-memory store, which no other process sees."""
    parsed = parse_url(url)
    if parsed.is_memory:
        return None
    if parsed.scheme == "sqlite" and parsed.path is not None:
        return "sqlite:///" + os.path.abspath(parsed.path)
    return url
