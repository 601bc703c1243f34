"""While a kernel works in a run: keep the run's lease from a thread, between cells and during them.

A kernel's commits renew its run's lease, but a person may leave a notebook idle for hours, and a
cell may run longer than the lease. A process on another machine (a server of the same store, in
another container) cannot see whether this kernel lives, only the lease: past it, that process
would take the run as abandoned, marking it failed or running its cells again. So a daemon thread
renews the lease while the run is in this kernel's hands; once the kernel dies, nothing renews it
and the run is taken over as before.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from .._loop import run_sync
from ..engine.runs.ownership import LEASE_SECONDS, lease_deadline
from ..errors import DurableError
from ..model import Commit, RunStatus, RunUpdate
from ..store.protocol import Conflict

if TYPE_CHECKING:
    from ..engine.cells.cell_run import CellRun

__all__ = ["KernelLease"]

_RUNNING = frozenset({RunStatus.RUNNING})


class KernelLease:
    """Renews, every ``every`` seconds, the lease of the run this kernel holds (if it holds one)."""

    def __init__(self, every: float = LEASE_SECONDS / 3) -> None:
        self.every = every
        self.renewals = 0
        self._cell_run: CellRun | None = None
        self._thread: threading.Thread | None = None
        # The lease this thread last wrote, and for which run.
        self._run_id: str | None = None
        self._until = 0.0

    def follow(self, cell_run: CellRun | None) -> None:
        """Keep the lease of ``cell_run``'s run from now on (None: of no run)."""
        self._cell_run = cell_run
        if cell_run is not None and self._thread is None:
            # Started at the first attach, not at load: a kernel that never attaches has no thread.
            self._thread = threading.Thread(target=self._keep, name="durable-nb-kernel-lease", daemon=True)
            self._thread.start()

    def _keep(self) -> None:
        stop = threading.Event()  # never set: the thread lives as long as the kernel
        while not stop.wait(self.every):
            self.renew()

    def renew(self) -> bool:
        """Renew the lease if the run is in this kernel's hands and a third of it is gone; say if renewed."""
        cell_run = self._cell_run
        if cell_run is None or not cell_run.writer.holds():
            return False  # detached, paused at a gate, ended, or taken by another process
        if cell_run.run.run_id != self._run_id:
            self._run_id, self._until = cell_run.run.run_id, 0.0
        # A kernel that commits renews the lease with each cell: write only when neither a cell nor
        # this thread has lately, so a busy kernel gets no extra write at all.
        if max(cell_run.run.lease_until or 0.0, self._until) - time.time() > LEASE_SECONDS * 2 / 3:
            return False
        until = lease_deadline()
        try:
            run_sync(
                cell_run.store.commit(
                    Commit(
                        run_id=cell_run.run_id,
                        run=RunUpdate(lease_until=until),
                        expect_status=_RUNNING,
                        expect_owner=cell_run.owner,
                    )
                )
            )
        except (Conflict, DurableError):
            # It moved on meanwhile (the next commit of a cell finds out and says so), or the store
            # failed: the lease lapses as it would without this thread.
            return False
        self._until = until
        self.renewals += 1
        return True
