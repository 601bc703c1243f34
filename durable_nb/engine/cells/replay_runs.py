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
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..._loop import run_sync
from ...errors import InvalidReplay
from ...model import RunStatus
from ...store.url import url_for_other_processes
from ..execution.executors import usable_cores
from .replays import ReplayPlan, ReplayProgress, create_replays, plan_replay, replay_progress

if TYPE_CHECKING:
    from ..runs.run import Run

__all__ = [
    "IN_REPLAY_VARIABLE",
    "STORE_VARIABLE",
    "WORKER_MODULE",
    "Replay",
    "default_jobs",
    "replay_task",
    "start_replay",
]

# The process that owns a replay's kernels (it lives in the headless front end).
WORKER_MODULE = "durable_nb.headless.replay_worker"
# Where that process finds the store's URL.
STORE_VARIABLE = "DURABLE_NB_REPLAY_STORE"
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
        self.tasks: list[Any] = []
        self.replayed: list[str] = plan.replayed

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
        return all(p.settled for p in progress) or not self.working(progress)

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
    statuses = {fork.run_id: run_sync(resolved.get_run(fork.run_id)).status for fork in forks}
    todo = [run_id for run_id in replay.run_ids if statuses[run_id] not in (RunStatus.COMPLETED, RunStatus.PAUSED)]
    if not todo:
        return replay
    if executor is not None:
        replay.tasks = [executor.submit(replay_task, url, run_id, kernel, os.getcwd()) for run_id in todo]
    else:
        replay.worker = _spawn(url, todo, kernel, jobs or default_jobs())
    return replay


def _command(run_ids: list[str], kernel: str, jobs: int) -> list[str]:
    return [sys.executable, "-m", WORKER_MODULE, "--jobs", str(jobs), "--kernel", kernel, "--", *run_ids]


def _spawn(url: str, run_ids: list[str], kernel: str, jobs: int) -> subprocess.Popen[bytes]:
    """Start the detached process that owns the replay's kernels (it outlives this one)."""
    return subprocess.Popen(
        _command(run_ids, kernel, jobs),
        env={**os.environ, STORE_VARIABLE: url},
        cwd=os.getcwd(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own session: an interrupt or the death of the asking kernel does not reach it
    )


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
