"""The stores one Jupyter server serves, opened once each and closed when the server stops."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ..engine.runs.ownership import pid_alive
from ..store import connect, disconnect
from ..store.protocol import Store
from .registry import KernelEntry, read_kernel_entry
from .stores import StoreNotServed, resolved_url, store_key, store_label

__all__ = ["ServedStore", "StoreCatalog"]


@dataclass(frozen=True, slots=True)
class ServedStore:
    """A store the server serves: its key, URL, and where the server found it."""

    key: str
    url: str
    # "config" (c.DurableNB.store or $DURABLE_NB_STORE), "default", or "kernel".
    source: str

    def describe(self) -> dict[str, str]:
        """Return what the browser sees of it: key, label (no password) and source."""
        return {"key": self.key, "label": store_label(self.url), "source": self.source}


class StoreCatalog:
    """The configured store, the default one and the stores of this server's kernels, by key.

    ``kernel_ids`` lists the kernels this server's kernel manager runs: only their registry
    entries count, and only while the process that wrote one lives (a killed kernel leaves its
    file behind).
    """

    def __init__(
        self, configured: str | None, kernel_ids: Callable[[], Iterable[str]], runtime_dir: Path | None = None
    ) -> None:
        self.configured = resolved_url(configured) if configured else None
        self.default = resolved_url(None)
        self.kernel_ids = kernel_ids
        self.runtime_dir = runtime_dir
        self._open: dict[str, Store] = {}

    def kernel(self, kernel_id: str) -> KernelEntry | None:
        """Return the registry entry of a kernel this server runs, if it is attached to a run."""
        if kernel_id not in set(self.kernel_ids()):
            return None
        entry = read_kernel_entry(kernel_id, runtime_dir=self.runtime_dir)
        return entry if entry is not None and pid_alive(entry.pid) else None

    def served(self) -> list[ServedStore]:
        """Return every store served, each once: the configured one, the default, then the kernels'."""
        found: dict[str, ServedStore] = {}
        named = [(self.configured, "config"), (self.default, "default")]
        named += [(entry.store, "kernel") for entry in map(self.kernel, sorted(self.kernel_ids())) if entry]
        for url, source in named:
            if url is None:
                continue
            try:
                key = store_key(url)
            except Exception:  # noqa: BLE001 - a kernel's entry naming no valid URL serves nothing
                continue
            found.setdefault(key, ServedStore(key, resolved_url(url), source))
        return list(found.values())

    def find(self, key: object) -> tuple[ServedStore, Store]:
        """Return the served store of ``key`` and the store itself (opened once); raise StoreNotServed."""
        served = next((s for s in self.served() if s.key == key), None) if isinstance(key, str) else None
        if served is None:
            # The key alone is named: what the server serves is listed to those allowed to see it.
            raise StoreNotServed(
                f"This Jupyter server serves no store with key {str(key)[:32]!r}; GET /durable/api/stores "
                "lists the stores it serves (a kernel's store is served while the kernel is attached to a run)."
            )
        store = self._open.get(served.key)
        if store is None:
            # Only stores that exist: a server must never create one because a browser asked.
            store = self._open[served.key] = connect(served.url, create=False)
        return served, store

    def close(self) -> int:
        """Close every store this catalog opened; return how many."""
        opened, self._open = self._open, {}
        for store in opened.values():
            disconnect(store.url)
        return len(opened)
