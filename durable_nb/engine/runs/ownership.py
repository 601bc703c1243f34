"""Who owns a running run, and whether that owner is still alive."""

from __future__ import annotations

import contextvars
import hashlib
import os
import stat
import tempfile
import threading
import time
from pathlib import Path

from ..._ids import host_name, owner_token, parse_owner
from ...model import RunStatus, RunUpdate

__all__ = [
    "LEASE_SECONDS",
    "active",
    "gave_up_on",
    "give_up",
    "lease_deadline",
    "owner_alive",
    "pid_alive",
    "release_on_interrupt",
    "taken_back",
    "taking_over",
    "this_owner",
]

# How long a run's owner may go silent before another machine may take the run over.
LEASE_SECONDS = float(os.environ.get("DURABLE_NB_LEASE_SECONDS", "60"))

# How many blocks of this process are executing each run: two tasks of one server may both
# try to take a run (a request and the periodic recovery), and the one that loses the race
# leaving its block must not make the winner's run look abandoned.
_active: dict[str, int] = {}
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


def taking_over(owner: str) -> RunUpdate:
    """The run update of ``owner`` taking a run to work on it: running, leased, its last error cleared."""
    return RunUpdate(status=RunStatus.RUNNING, owner=owner, lease_until=lease_deadline(), error=None, error_type=None)


class active:
    """Mark a run as being executed by this process for the duration of a ``with`` block."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    def __enter__(self) -> None:
        with _active_lock:
            _active[self.run_id] = _active.get(self.run_id, 0) + 1

    def __exit__(self, *_: object) -> None:
        with _active_lock:
            left = _active.get(self.run_id, 0) - 1
            if left > 0:
                _active[self.run_id] = left
            else:
                _active.pop(self.run_id, None)


def pid_alive(pid: int) -> bool:
    """True if a process ``pid`` runs on this host (another user's counts); a zombie has ended."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return not _zombie(pid)
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """True if ``pid`` has exited and waits only to be reaped (Linux; elsewhere never said).

    A killed kernel whose parent died too waits for init to reap it, which can take a moment:
    signals still reach it, yet it will never renew a lease or commit again.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] in (["Z"], ["X"])


# Set by a server for the runs it drives: stopping the server hands them back (pending, no
# owner) for the next one to continue, instead of recording a cancel as Ctrl-C does.
release_on_interrupt: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "durable_nb_release_on_interrupt", default=False
)

# Runs this process gave up because the store refused to record it (see give_up).
_given_up: set[str] = set()


def _released_folder(create: bool = False) -> Path | None:
    # Private to this user: a marker anyone could plant would let them take a live run.
    folder = Path(tempfile.gettempdir()) / f"durable_nb-{os.getuid()}-released"
    try:
        if create:
            folder.mkdir(mode=0o700, exist_ok=True)
        info = folder.lstat()
    except OSError:
        return None  # none made yet (nothing was given up), or one this user cannot use
    if info.st_uid != os.getuid() or info.st_mode & 0o077 or not stat.S_ISDIR(info.st_mode):
        return None
    return folder


def _marker(folder: Path, run_id: str, owner: str, lease_until: float | None) -> Path:
    # Keyed on the lease as the store last recorded it: taking the run again writes a new
    # lease, which makes an old marker mean nothing.
    key = hashlib.sha256(f"{run_id}\0{owner}\0{lease_until!r}".encode()).hexdigest()[:40]
    return folder / key


def give_up(run_id: str, owner: str, lease_until: float | None) -> None:
    """Record that this process no longer works on a run whose release the store refused to write.

    Other processes of this machine and user then treat the run's owner as gone (another
    machine waits for the lease, which is no longer renewed), so the run can be resumed.
    """
    with _active_lock:
        _given_up.add(run_id)
        _active.pop(run_id, None)
    folder = _released_folder(create=True)
    if folder is not None:
        try:
            _marker(folder, run_id, owner, lease_until).touch()
        except OSError:
            pass  # then only the lease tells; nothing better is left to try


def gave_up_on(run_id: str) -> bool:
    """Tell whether this process gave up a run it still appears to own."""
    with _active_lock:
        return run_id in _given_up


def taken_back(run_id: str) -> None:
    """Forget a give-up: this process has just written the run as its owner again."""
    with _active_lock:
        _given_up.discard(run_id)


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
        if not pid_alive(pid):
            return False
        started = token.split(".", 1)[0]
        actual = _start_time(pid)
        if not (actual is None or started in ("0", actual)):
            return False
        folder = _released_folder()
        return folder is None or not _marker(folder, run_id, owner, lease_until).exists()
    # Another machine: only its lease can tell.
    return lease_until is not None and lease_until > time.time()
