"""The process that owns a replay's kernels: ``python -m durable_nb.headless.replay_worker RUN_ID …``.

Started detached (its own session) by ``dnb.replay``, so the replays go on when the kernel that asked
for them dies. It runs each fork in a kernel of its own, as many at once as ``--jobs`` says. The
store's URL comes in its environment (it may hold a password), the forks' ids as arguments: data.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from ..engine.cells.replay_runs import STORE_VARIABLE, default_jobs

__all__ = ["main", "run_forks"]


def run_forks(store: str, run_ids: Sequence[str], jobs: int, kernel: str = "python3") -> None:
    """Replay each fork in its own kernel, ``jobs`` at once; a fork that cannot run is marked failed, saying why."""
    from .replay_kernel import record_failure, replay_fork

    def one(run_id: str) -> None:
        try:
            replay_fork(store, run_id, kernel)
        except Exception as error:  # noqa: BLE001 - one fork's trouble must not stop the others
            record_failure(store, run_id, error)  # said on the fork: this process has no one to tell

    with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(run_ids)))) as pool:
        list(pool.map(one, run_ids))


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
    run_forks(store, args.run_ids, args.jobs, args.kernel)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
