"""Where a store's blocking work runs: chosen by whoever drives the store, never by the store.

Every store operation is one blocking call on a connection. A store hands it to ``offload``,
which returns an awaitable of its result. By default the call runs on a worker thread, so
that no event loop waits for the disk or for another process's lock; the sync API (the
package's driver) installs a policy of its own with ``use_offload``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

__all__ = ["Offload", "offload", "use_offload"]

T = TypeVar("T")
Offload = Callable[[Callable[[], Any]], Awaitable[Any]]


async def _in_a_thread(call: Callable[[], T]) -> T:
    import asyncio  # here: importing the package installs a policy before any loop is needed

    return await asyncio.to_thread(call)


_policy: Offload = _in_a_thread


def use_offload(policy: Offload) -> None:
    """Install where store operations run from now on (the package's driver does, on import)."""
    global _policy
    _policy = policy


def offload(call: Callable[[], T]) -> Awaitable[T]:
    """Run a store's blocking ``call`` where the installed policy says; await its result."""
    return _policy(call)
