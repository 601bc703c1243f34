"""Who owns a running run, and whether that owner is still alive."""

from __future__ import annotations

import os
import threading
import time

from .._ids import host_name, owner_token, parse_owner

__all__ = ["LEASE_SECONDS", "active", "lease_deadline", "owner_alive", "this_owner"]

# How long a run's owner may go silent before another machine may take the run over.
LEASE_SECONDS = float(os.environ.get("DURABLE_NB_LEASE_SECONDS", "60"))

_active: set[str] = set()
_active_lock = threading.Lock()


def _start_time(pid: int) -> str | None:
    # The kernel's start time of a pid tells a live owner from a stranger that reused its pid.
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        return fields[19].decode()
    except (OSError, IndexError):
        return None


_owner: tuple[int, str] | None = None


def this_owner() -> str:
    """Return this process's owner token: ``host:pid:start-time.random``."""
    global _owner
    if _owner is None or _owner[0] != os.getpid():
        host, pid, rand = parse_owner(owner_token())
        _owner = (pid, f"{host}:{pid}:{_start_time(pid) or '0'}.{rand}")
    return _owner[1]


def lease_deadline() -> float:
    """Return the lease expiry for a run taken or renewed now."""
    return time.time() + LEASE_SECONDS


class active:
    """Mark a run as being executed by this process for the duration of a ``with`` block."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    def __enter__(self) -> None:
        with _active_lock:
            _active.add(self.run_id)

    def __exit__(self, *_: object) -> None:
        with _active_lock:
            _active.discard(self.run_id)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_alive(run_id: str, owner: str | None, lease_until: float | None) -> bool:
    """Tell whether ``owner`` still works on the run; a run of a live owner is never taken."""
    if not owner:
        return False
    try:
        host, pid, token = parse_owner(owner)
    except ValueError:
        return lease_until is not None and lease_until > time.time()
    if owner == this_owner():
        with _active_lock:
            return run_id in _active
    if host == host_name():
        if not _pid_alive(pid):
            return False
        started = token.split(".", 1)[0]
        actual = _start_time(pid)
        return actual is None or started in ("0", actual)
    # Another machine: only its lease can tell.
    return lease_until is not None and lease_until > time.time()
