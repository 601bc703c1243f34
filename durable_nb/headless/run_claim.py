"""Before ``run-notebook`` starts a kernel: hold the output file, and claim the run for the kernel.

Two processes never write one output notebook at once: the command holds a lock beside it
(``.NAME.lock``) for as long as it runs, and a second command for the same output stops before
any kernel starts. The run is claimed in the store (see ``engine.runs.claims``) by this process,
created if need be with the notebook's path, parameters and run name in its meta, so that a
server whose notebooks folder holds the notebook can start it again after this process dies.
The kernel then takes the run from this process's claim.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .._loop import run_sync
from ..engine.runs.claims import claim, claimable, unclaim
from ..engine.runs.ownership import this_owner
from ..errors import InvalidNotebookRun, OutputInUse, RunOwnedElsewhere
from ..model import RunStatus
from .notebook_run import NotebookRun

__all__ = ["META", "claim_run", "hold_output", "release_claim"]

META = "notebook"  # the key of a run's meta that holds {"path", "parameters", "run"}


@contextlib.contextmanager
def hold_output(target: Path | None) -> Iterator[None]:
    """Hold ``target``'s lock while the block runs; raise OutputInUse if another process holds it."""
    if target is None:
        yield
        return
    try:
        import fcntl
    except ImportError:  # no advisory locks here (Windows): one process per output is the user's to keep
        yield
        return
    lock = target.with_name(f".{target.name}.lock")
    try:
        handle = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as error:
        raise InvalidNotebookRun(
            f"Cannot write beside the output notebook {target} ({error.strerror or error}): give -o a path "
            "in a folder you can write to."
        ) from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputInUse(
                f"Another process is writing {target} (it holds {lock}); wait until it ends, "
                "or write this run's output elsewhere with -o."
            ) from None
        yield
    finally:
        os.close(handle)  # closing lets the lock go


def claim_run(prepared: NotebookRun, handed: str | None, meta: dict[str, Any]) -> str | None:
    """Claim the prepared notebook's run for this process (creating it, pending, with ``meta``);
    return the token its kernel takes it from, None for a run no kernel takes (completed, paused)."""
    return run_sync(_aclaim_run(prepared, handed, meta))


async def _aclaim_run(prepared: NotebookRun, handed: str | None, meta: dict[str, Any]) -> str | None:
    from ..engine.cells.cell_run import new_notebook_run
    from ..store import resolve_store

    store = resolve_store(prepared.store)
    owner = this_owner()
    record, created = await store.create_run(
        new_notebook_run(prepared.run_name, prepared.run_key, owned=False, meta=meta, claimed_by=owner)
    )
    if created:
        return owner
    if record.status in (RunStatus.COMPLETED, RunStatus.PAUSED):
        return None  # the kernel restores it, or says where it waits
    if handed is not None and record.owner != handed:
        # Started for a server's claim that is gone: cancelled, or taken over by a server that outlived ours.
        raise RunOwnedElsewhere(
            f"Run {record.run_id} ({record.name}) is no longer claimed by the server that started this process "
            f"(it is {record.status.value}, owner {record.owner}); that server, or the next, decides what runs next."
        )
    if claimable(record, handed) and await claim(store, record, owner, handed) is not None:
        return owner
    now = await store.get_run(record.run_id)
    raise RunOwnedElsewhere(
        f"Run {now.run_id} ({now.name}) is worked on by another live process ({now.owner}); wait for it to "
        "end (or cancel it) before running this notebook with these parameters again."
    )


def release_claim(prepared: NotebookRun, owner: str | None) -> None:
    """Let go of this process's claim if no kernel took it (one that failed to start, say)."""
    if owner is None:
        return
    from ..store import resolve_store

    store = resolve_store(prepared.store)
    runs = run_sync(store.list_runs(prepared.run_name, statuses=[RunStatus.PENDING]))
    for run in runs:
        if run.idempotency_key == prepared.run_key and run.owner == owner:
            run_sync(unclaim(store, run.run_id, owner))
