"""A driver's failure, told as the store's: what failed, where, and what the user can do about it.

Both backends turn what their driver raises (``sqlite3.Error``, an ``OSError`` of a value file,
psycopg's errors, a pool that found no connection) into one ``StoreFailed`` with the driver's
exception chained, so the engine settles a run the same way whatever the store.
"""

from __future__ import annotations

import errno

from .. import _tally as tally
from ..errors import StoreFailed

__all__ = ["WRITES", "advice_for", "operation_name", "store_failed"]

# Matched against the driver's message, lowercased: the first that matches gives the advice.
_ADVICE = (
    (("disk is full", "no space left", "disk full", "could not extend file"), "free disk space"),
    (
        ("readonly", "read-only", "read only", "permission denied", "not authorized", "access denied"),
        "make the store and its folder writable by this user (check the file's mode, owner and "
        "immutable flag, and that the file system is mounted read-write)",
    ),
    (("disk i/o error", "input/output error", "malformed"), "check the disk: the file system reported an I/O error"),
    (
        ("database is locked", "busy"),
        "another process held the store's write lock longer than this one waits for it (60 s); "
        "find the process that keeps it",
    ),
    (
        ("connection", "server closed", "terminat", "timeout", "timed out", "couldn't get a connection"),
        "check that the database server runs and is reachable",
    ),
)
# The operations that write; every other one only reads, and is safe to try again.
WRITES = frozenset(
    {
        "_commit",
        "_put_step",
        "_store_writes",
        "_create_run",
        "_prune",
        "_delete_unreferenced",
        "delete_runs",
        "forget_checkpoints",
        "copy_pending_writes",
    }
)
_NAMES = {
    "_commit": "write a commit",
    "_put_step": "write a checkpoint",
    "_store_writes": "write pending writes",
    "_create_run": "create a run",
    "_prune": "prune old history",
    "_delete_unreferenced": "delete unreferenced value files",
    "delete_runs": "delete runs",
    "forget_checkpoints": "delete checkpoints",
    "copy_pending_writes": "copy pending writes",
}

_ERRNO_ADVICE = {
    errno.ENOSPC: "free disk space",
    errno.EDQUOT: "free disk space (the user's quota is used up)",
    errno.EROFS: "remount the file system read-write",
    errno.EACCES: "make the store and its folder writable by this user",
    errno.EPERM: "make the store and its folder writable by this user (check the immutable flag)",
    errno.EIO: "check the disk: the file system reported an I/O error",
}


def operation_name(function_name: str) -> str:
    """Return how a message names a store operation: ``_commit`` is "write a commit"."""
    return _NAMES.get(function_name, "read " + function_name.strip("_").replace("_", " "))


def advice_for(error: BaseException) -> str:
    """Return what a user can do about a driver's ``error``."""
    number = getattr(error, "errno", None)
    if isinstance(number, int) and number in _ERRNO_ADVICE:
        return _ERRNO_ADVICE[number]
    text = str(error).lower()
    for needles, advice in _ADVICE:
        if any(needle in text for needle in needles):
            return advice
    return "check the store"


def store_failed(
    store: str, operation: str, error: BaseException, attempts: int = 1, *, reported: bool = False
) -> StoreFailed:
    """Return the ``StoreFailed`` for ``error`` raised by ``operation`` on ``store`` (chain it with ``from``);
    a server counts it in its metrics unless it was ``reported`` already (one failure told anew)."""
    if not reported:
        tally.store_failed()
    reason = " ".join(str(error).split()) or type(error).__name__
    tried = f" (tried {attempts} times)" if attempts > 1 else ""
    return StoreFailed(
        f"The store {store} could not {operation}{tried}: {reason}. Nothing of this operation was kept; "
        f"{advice_for(error)}, then resume the run (a run this process was working on is left "
        "resumable from any process).",
        store=store,
        operation=operation,
    )
