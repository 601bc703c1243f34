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
    loop = running if running is not None else _thread_loop()
    if running is not None:
        _make_reentrant(running)
    task = loop.create_task(coro)
    try:
        return loop.run_until_complete(task)
    except BaseException:
        # Ctrl-C (or a kernel interrupt) lands outside the task: cancel it and let it finish
        # its cleanup, so an interrupted run is recorded as cancelled instead of left running.
        if not task.done():
            task.cancel()
            try:
                loop.run_until_complete(task)
            except BaseException:  # noqa: BLE001 - the original interruption is what we re-raise
                pass
        raise
