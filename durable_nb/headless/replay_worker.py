"""The process that owns a replay's kernels: ``python -m durable_nb.headless.replay_worker RUN_ID …``.

Started detached (its own session) by ``dnb.replay``, so the replays go on when the kernel that asked
for them dies. It runs each fork in a kernel of its own, as many at once as ``--jobs`` says. A fork
that pauses at a gate is continued here when someone decides the gate while this process still
replays other forks; once none is left to replay it ends, and a fork decided later continues when
the same replay is asked for again. The store's URL comes in its environment (it may hold a
password), the forks' ids as arguments: data.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from .._loop import run_sync
from ..engine.cells.replay_runs import LOG_VARIABLE, STORE_VARIABLE, default_jobs, record_failure
from ..model import RunStatus

__all__ = ["main", "run_forks"]


def run_forks(store: str, run_ids: Sequence[str], jobs: int, kernel: str = "python3", poll: float = 0.5) -> None:
    """Replay each fork in its own kernel, ``jobs`` at once; a fork that cannot run is marked failed, saying why.

    A fork paused at a gate is replayed again (its committed cells restored, the gated cell continued
    with the decision) when the gate is decided while other forks are still being replayed here.
    """
    from .replay_kernel import replay_fork

    def one(run_id: str) -> RunStatus | None:
        try:
            return replay_fork(store, run_id, kernel)
        except Exception as error:  # noqa: BLE001 - one fork's trouble must not stop the others
            # Said on the fork: this process has no one to tell.
            kind = type(error).__name__
            record_failure(store, run_id, f"Replay could not run: {kind}: {error}", kind)
            return None

    with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(run_ids)))) as pool:
        running = {pool.submit(one, run_id): run_id for run_id in run_ids}
        waiting: set[str] = set()  # forks that paused at a gate (or were decided as their kernel ended)
        continued: dict[str, int] = {}  # the decision each fork was last continued after
        while running:
            done, _ = wait(running, timeout=poll, return_when=FIRST_COMPLETED)
            for future in done:
                if future.result() in (RunStatus.PAUSED, RunStatus.PENDING):
                    waiting.add(running[future])
                del running[future]
            for run_id in sorted(waiting):
                decision = _decision(store, run_id)
                if decision is not None and continued.get(run_id) != decision:
                    waiting.discard(run_id)
                    continued[run_id] = decision
                    running[pool.submit(one, run_id)] = run_id


def _decision(store: str, run_id: str) -> int | None:
    """The seq of the decision a fork waits to continue after: its gate decided, nothing run since
    (not expired, nor taken by another kernel); None otherwise."""
    from ..errors import DurableError
    from ..store import resolve_store

    try:
        resolved = resolve_store(store, existing=True)
        if run_sync(resolved.get_run(run_id)).status is not RunStatus.PENDING:
            return None
        checkpoints = run_sync(resolved.list_checkpoints(run_id))
    except DurableError:
        return None  # the store is gone: nothing to continue
    last = checkpoints[-1] if checkpoints else None
    return last.seq if last is not None and last.step.startswith("approved:") else None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the forks named on the command line (the store in ``$DURABLE_NB_REPLAY_STORE``)."""
    parser = argparse.ArgumentParser(prog="python -m durable_nb.headless.replay_worker")
    parser.add_argument("run_ids", nargs="+", help="The forks to replay.")
    parser.add_argument("--jobs", type=int, default=default_jobs(), help="How many kernels run at once.")
    parser.add_argument("--kernel", default="python3", help="The kernel to start for each fork.")
    args = parser.parse_args(argv)
    store = os.environ.pop(STORE_VARIABLE, None)
    if not store:
        parser.error(f"${STORE_VARIABLE} names the store the forks live in; it is not set.")
    log = os.environ.pop(LOG_VARIABLE, None)
    run_forks(store, args.run_ids, args.jobs, args.kernel)
    if log:
        Path(log).unlink(missing_ok=True)  # all went as it should: nothing to read there
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
