"""While ``run-notebook``'s kernel runs: keep the lease of the run its kernel holds.

A kernel renews its run's lease only when a cell commits. A server on another machine (another
container of one deployment) cannot see whether that kernel lives, only the lease; a cell longer
than the lease would look abandoned there and be started again by a second process while the
first still runs it. The process that started the kernel renews the lease for it, as a workflow's
watch does for a node in flight, and only for an owner that is its own child kernel: once the
kernel dies, nothing renews its lease, and the run is taken over as before.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from .._ids import host_name, parse_owner
from .._loop import run_sync
from ..engine.runs.ownership import LEASE_SECONDS, lease_deadline
from ..errors import DurableError
from ..model import Commit, RunStatus, RunUpdate
from ..store.protocol import Conflict

__all__ = ["LeaseKeeper", "child_of_this_process"]


def child_of_this_process(pid: int) -> bool:
    """True if ``pid`` is a live child of this process (read from /proc; False where there is none)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # The command name (field 2) is in parentheses and may hold spaces: the fields after it are plain.
    fields = stat.rpartition(")")[2].split()
    return len(fields) > 1 and fields[0] not in ("Z", "X") and fields[1] == str(os.getpid())


class LeaseKeeper:
    """A daemon thread renewing the lease of ``run_id`` while its owner is this process's child kernel."""

    def __init__(self, store: str | None, run_id: str, every: float = LEASE_SECONDS / 3) -> None:
        self.store = store
        self.run_id = run_id
        self.every = every
        self.renewals = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep, name="durable-nb-lease", daemon=True)

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.every + 30)

    def _keep(self) -> None:
        from ..store import resolve_store

        while not self._stop.wait(self.every):
            try:
                store = resolve_store(self.store)
                run = run_sync(store.get_run(self.run_id))
                if run.status is not RunStatus.RUNNING or run.owner is None:
                    continue  # not taken yet, paused or over: nothing of ours to keep
                host, pid, _ = parse_owner(run.owner)
                if host != host_name() or not child_of_this_process(pid):
                    continue  # another process's run (or a kernel of ours that died): its lease is not ours to keep
                run_sync(
                    store.commit(
                        Commit(
                            run_id=self.run_id,
                            run=RunUpdate(lease_until=lease_deadline()),
                            expect_status=frozenset({RunStatus.RUNNING}),
                            expect_owner=run.owner,
                        )
                    )
                )
                self.renewals += 1
            except (Conflict, DurableError, ValueError):
                continue  # it moved on meanwhile, or the store failed: the lease lapses as it should
