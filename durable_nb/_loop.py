"""The sync driver: run the async core from any thread, with or without a running loop.

This is the one module that patches event loops. A sync call made on a thread whose
loop is already running (a Jupyter cell, a sync function called from a coroutine) re-enters
that loop with nest-asyncio2, as ipykernel itself does, instead of failing with
"event loop is already running" or deadlocking on a second thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run_sync"]

T = TypeVar("T")

_local = threading.local()
_patched: set[int] = set()
_patch_lock = threading.Lock()


def _thread_loop() -> asyncio.AbstractEventLoop:
    # One long-lived loop per thread: creating a loop per call would cost more than the
    # store round trip it drives.
    loop: asyncio.AbstractEventLoop | None = getattr(_local, "loop", None)
    if loop is None or loop.is_closed():
        loop = asyncio.new_event_loop()
        _local.loop = loop
    return loop


def _make_reentrant(loop: asyncio.AbstractEventLoop) -> None:
    with _patch_lock:
        if id(loop) in _patched:
            return
        import nest_asyncio2

        nest_asyncio2.apply(loop)
        _patched.add(id(loop))


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from synchronous code and return its result."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is None:
        return _thread_loop().run_until_complete(coro)
    _make_reentrant(running)
    return running.run_until_complete(coro)
