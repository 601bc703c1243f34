"""Replays under way: the forks made (or found again) and the processes that replay them.

The kernels that replay the forks belong to a detached process (``python -m
durable_nb.headless.replay_worker``, started in its own session), so a replay survives the kernel
that asked for it. With ``executor=`` (a ``concurrent.futures`` executor, or a Dask client) each
fork is one task there, which runs that same process for it. Progress is read from the store,
never from the kernels. The store's URL reaches the process in its environment (it may hold a
password), the forks' ids as arguments: data, never code.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..._loop import run_sync
from ...errors import DurableError, InvalidReplay
from ...model import Commit, EventType, NewEvent, RunStatus, RunUpdate
from ...store.url import url_for_other_processes
from ..execution.executors import usable_cores
from .replays import ReplayPlan, ReplayProgress, create_replays, plan_replay, replay_progress

if TYPE_CHECKING:
    from ..runs.run import Run

__all__ = [
    "IN_REPLAY_VARIABLE",
    "LOG_VARIABLE",
    "STORE_VARIABLE",
    "WORKER_MODULE",
    "Replay",
    "default_jobs",
    "record_failure",
    "replay_task",
    "start_replay",
]

# The process that owns a replay's kernels (it lives in the headless front end).
WORKER_MODULE = "durable_nb.headless.replay_worker"
# Where that process finds the store's URL.
STORE_VARIABLE = "DURABLE_NB_REPLAY_STORE"
# Where that process's own output goes (it removes the file when it ends well).
LOG_VARIABLE = "DURABLE_NB_REPLAY_LOG"
# Set in a replay's kernels: a replay asked for there (a replayed cell calling dnb.replay) makes nothing.
IN_REPLAY_VARIABLE = "DURABLE_NB_IN_REPLAY"


def default_jobs() -> int:
    """How many forks run at once by default: the cores this process may use."""
    return usable_cores()


class Replay:
    """A replay under way: its forks, the process (or tasks) replaying them, and how far they got."""

    def __init__(self, plan: ReplayPlan, store: Any, url: str, run_ids: list[str]) -> None:
        self.plan = plan
        self.store = store
        self.url = url
        self.run_ids = run_ids
        self.worker: subprocess.Popen[bytes] | None = None
        self.log: Path | None = None  # where the worker's own output goes
        self.tasks: list[Any] = []
        self.replayed: list[str] = plan.replayed
        # Forks handed to be replayed again, as they stood then: one that failed before is not
        # settled until its new replay has changed it.
        self.handed: dict[str, float] = {}
        # finished() may be called from a progress widget's thread and the caller's at once: the
        # check of how the worker ended, which may mark forks failed, must run once.
        self._worker_lock = threading.Lock()
        self._worker_checked = False

    def progress(self) -> list[ReplayProgress]:
        """Return how far each fork got, as the store says."""
        return run_sync(replay_progress(self.store, self.run_ids))

    def working(self, progress: list[ReplayProgress]) -> bool:
        """True while something replays the forks: this replay's process or tasks, or a live kernel
        (of an earlier call of the same replay) holding one of them."""
        if self.worker is not None and self.worker.poll() is None:
            return True
        if any(not task.done() for task in self.tasks):
            return True
        return any(p.held for p in progress)

    def finished(self, progress: list[ReplayProgress] | None = None) -> bool:
        """True once every fork settled (finished, failed, paused at a gate), or nothing replays them any more."""
        progress = self.progress() if progress is None else progress
        if all(self.settled(p) for p in progress):
            return True
        if self.working(progress):
            return False
        self._after_worker(progress)
        return True

    def settled(self, progress: ReplayProgress) -> bool:
        """True once a fork finished, failed or waits at a gate since this replay handed it out."""
        return progress.settled and self.handed.get(progress.run_id) != progress.updated_at

    def _after_worker(self, progress: list[ReplayProgress]) -> None:
        """Once the worker process has ended: forks it left unsettled fail, saying how it ended and what it
        printed (a later call of the same replay runs them again)."""
        with self._worker_lock:
            if self.worker is None or self.worker.returncode is None or self._worker_checked:
                return
            self._worker_checked = True
        code = self.worker.returncode
        if code == 0:
            return  # it ended as it should: a fork left pending (a gate decided late) waits for the next call
        left = [p.run_id for p in progress if not self.settled(p) and not p.held]
        ended = f"exited with code {code}" if code >= 0 else f"was killed by signal {-code}"
        said = _tail(self.log)
        message = f"The replay's process {ended} before this fork settled" + (
            f"; the end of its output ({self.log}):\n{said}" if said else "."
        )
        for run_id in left:
            record_failure(self.url, run_id, message, "ReplayProcessEnded")

    def wait(self, poll: float = 0.2, on_progress: Callable[[list[ReplayProgress]], None] | None = None) -> None:
        """Block until every fork settled (or nothing replays them any more)."""
        while True:
            progress = self.progress()
            if on_progress is not None:
                on_progress(progress)
            if self.finished(progress):
                if self.worker is not None:
                    self.worker.poll()  # reaped: no zombie left behind
                return
            time.sleep(poll)

    def runs(self) -> list[Run]:
        """Return the forks as public run handles."""
        from ..runs.run import load_run

        return [run_sync(load_run(self.store, run_id)) for run_id in self.run_ids]


def _shared_url(url: str) -> str:
    """The store URL the replay's processes open; an in-memory store refused."""
    shared = url_for_other_processes(url)
    if shared is None:
        raise InvalidReplay(
            "A replay runs in other processes, which cannot see an in-memory store: use a sqlite:///path "
            "or postgresql:// store."
        )
    return shared


def start_replay(
    store: Any,
    run: str,
    at: str,
    set: Mapping[str, Any] | None = None,
    sweep: Mapping[str, Sequence[Any]] | None = None,
    executor: Any = None,
    *,
    kernel: str = "python3",
    jobs: int | None = None,
) -> Replay:
    """Check the replay, make (or find again) its forks and start replaying those not settled; return at once.

    InvalidReplay, and nothing created, for an unknown cell, a value of another type, an empty
    sweep or a run with no committed cell.
    """
    from ...store import resolve_store
    from ...store.secret import load_secret
    from ..state.values import ValueCodec

    resolved = resolve_store(store, existing=True)
    url = _shared_url(resolved.url)
    values = ValueCodec(resolved, load_secret())
    plan = run_sync(plan_replay(resolved, values, run, at, set, sweep))
    forks = run_sync(create_replays(resolved, values, plan))
    replay = Replay(plan, resolved, url, [fork.run_id for fork in forks])
    # The cells the forks replay, as each was made with (a fork made before later cells were committed has fewer).
    replay.replayed = list(dict.fromkeys(n for fork in forks for n in fork.meta.get("replay", {}).get("replayed", [])))
    # A fork that finished or waits at a gate is left as it is; any other (new, or stopped by a crash
    # or a failed cell) is replayed: its committed cells restore, the rest run.
    records = {fork.run_id: run_sync(resolved.get_run(fork.run_id)) for fork in forks}
    todo = [r for r in replay.run_ids if records[r].status not in (RunStatus.COMPLETED, RunStatus.PAUSED)]
    replay.handed = {run_id: records[run_id].updated_at for run_id in todo}
    if not todo:
        return replay
    if executor is not None:
        replay.tasks = [executor.submit(replay_task, url, run_id, kernel, os.getcwd()) for run_id in todo]
    else:
        replay.log = _log_path(todo[0])
        replay.worker = _spawn(url, todo, kernel, jobs or default_jobs(), replay.log)
    return replay


def _command(run_ids: list[str], kernel: str, jobs: int) -> list[str]:
    return [sys.executable, "-m", WORKER_MODULE, "--jobs", str(jobs), "--kernel", kernel, "--", *run_ids]


def _log_path(run_id: str) -> Path:
    """Where a replay's process writes what it prints: a folder only this user can enter (the output may show data)."""
    folder = Path(tempfile.gettempdir()) / f"durable-nb-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        mine = folder.lstat()
        if mine.st_uid != os.getuid() or not folder.is_dir() or folder.is_symlink():
            raise PermissionError(f"{folder} is not this user's folder")
        folder.chmod(0o700)
    except OSError:
        folder = Path(tempfile.mkdtemp(prefix="durable-nb-"))  # somebody else's name: a fresh private folder
    return folder / f"replay-{run_id}-{time.time_ns()}.log"


def _tail(log: Path | None, lines: int = 8) -> str:
    """The last lines the replay's process wrote (empty when it wrote nothing)."""
    if log is None:
        return ""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _spawn(url: str, run_ids: list[str], kernel: str, jobs: int, log: Path) -> subprocess.Popen[bytes]:
    """Start the detached process that owns the replay's kernels (it outlives this one)."""
    with open(log, "ab") as output:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            _command(run_ids, kernel, jobs),
            env={**os.environ, STORE_VARIABLE: url, LOG_VARIABLE: str(log)},
            cwd=os.getcwd(),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own session: an interrupt or the death of the asking kernel does not reach it
        )


def record_failure(store: str, run_id: str, message: str, error_type: str) -> None:
    """Mark a fork that could not be replayed failed, saying why (a later call of its replay runs it again)."""
    from ...store import resolve_store

    failed = RunUpdate(status=RunStatus.FAILED, error=message, error_type=error_type)
    events = [NewEvent(EventType.RUN_FAILED, None, {"error": message})]
    try:
        resolved = resolve_store(store, existing=True)
        run_sync(resolved.commit(Commit(run_id, events=events, run=failed, expect_owner=None)))
    except DurableError:
        pass  # the store is gone: nothing to say it on


def replay_task(url: str, run_id: str, kernel: str = "python3", cwd: str | None = None) -> int:
    """Replay one fork in a kernel, as a task of an executor (a Dask worker, say); return the process's exit code."""
    done = subprocess.run(
        _command([run_id], kernel, 1),
        env={**os.environ, STORE_VARIABLE: url},
        cwd=cwd if cwd and os.path.isdir(cwd) else None,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    return done.returncode
