"""While nodes run: renew the run's lease, and notice a cancel from anywhere.

A cancel from this process reaches the runner at once through ``notify_cancelled``; a cancel
from another process or machine is seen by polling the run row, which costs one indexed
read per ``POLL_SECONDS`` and only while a node is in flight.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable

from ...errors import StoreError
from ...model import Commit, RunStatus, RunUpdate
from ...store.protocol import Conflict, Store
from .ownership import LEASE_SECONDS, lease_deadline

__all__ = ["POLL_SECONDS", "Watch", "notify_cancelled"]

POLL_SECONDS = float(os.environ.get("DURABLE_NB_POLL_SECONDS", "0.25"))

_live: dict[str, tuple[asyncio.AbstractEventLoop, Callable[[], None]]] = {}
_live_lock = threading.Lock()


def notify_cancelled(run_id: str) -> None:
    """Tell a runner of this process that its run was cancelled (safe from any thread)."""
    with _live_lock:
        entry = _live.get(run_id)
    if entry is not None:
        loop, abandon = entry
        loop.call_soon_threadsafe(abandon)


class Watch:
    """A background task that renews the lease and calls ``abandon`` when the run is taken away."""

    def __init__(self, store: Store, run_id: str, owner: str, abandon: Callable[[], None]) -> None:
        self.store = store
        self.run_id = run_id
        self.owner = owner
        self.abandon = abandon
        self._task: asyncio.Task[None] | None = None
        # The lease as this watch last renewed it (the store's copy, should it become unreadable).
        self.lease_until: float | None = None

    def __enter__(self) -> Watch:
        loop = asyncio.get_running_loop()
        with _live_lock:
            _live[self.run_id] = (loop, self.abandon)
        self._task = loop.create_task(self._poll())
        return self

    def __exit__(self, *_: object) -> None:
        with _live_lock:
            if _live.get(self.run_id, (None, None))[1] is self.abandon:
                del _live[self.run_id]
        if self._task is not None:
            self._task.cancel()

    async def _poll(self) -> None:
        renewed = time.monotonic()
        while True:
            await asyncio.sleep(POLL_SECONDS)
            try:
                run = await self.store.get_run(self.run_id)
                if run.status is not RunStatus.RUNNING or run.owner != self.owner:
                    self.abandon()
                    return
                if time.monotonic() - renewed >= LEASE_SECONDS / 3:
                    result = await self.store.commit(
                        Commit(
                            run_id=self.run_id,
                            run=RunUpdate(lease_until=lease_deadline()),
                            expect_status=frozenset({RunStatus.RUNNING}),
                            expect_owner=self.owner,
                        )
                    )
                    self.lease_until = result.run.lease_until
                    renewed = time.monotonic()
            except Conflict:
                self.abandon()
                return
            except StoreError:
                # A failing store is the node's commit to report (it releases the run); the watch
                # keeps looking, and a lease it cannot renew lapses as it should.
                continue
