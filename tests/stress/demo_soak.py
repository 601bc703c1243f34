"""Run ``durable-nb demo`` many times on a loaded machine and count the runs that completed.

    python tests/stress/demo_soak.py --runs 50 --busy 2

Each run is a fresh process in a fresh folder with a fresh bytecode cache (as after an install,
when kernels start slowest). ``--busy N`` keeps N processes spinning meanwhile. A run counts as
completed when the demo exits 0 and its last line says the run is completed; the script exits
non-zero if any run did not, or if a run exited 0 without completing (the demo must never claim
success it did not have). Not run in CI: 50 runs take several minutes.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time


def _spin() -> None:
    while True:
        pass


def one_run(index: int) -> tuple[int, bool, str]:
    """Run the demo once; return its exit code, whether it completed, and its last line."""
    with tempfile.TemporaryDirectory(prefix="demo-soak-") as folder:
        env = dict(os.environ, PYTHONPYCACHEPREFIX=os.path.join(folder, "pycache"))
        done = subprocess.run(
            [sys.executable, "-m", "durable_nb.cli", "demo", "--folder", os.path.join(folder, "work")],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
    lines = done.stdout.strip().splitlines() or [done.stderr.strip()]
    last = lines[-1] if lines else ""
    completed = done.returncode == 0 and " is completed;" in last
    return done.returncode, completed, last


def main() -> int:
    """Run the soak and print one line per run and a summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--busy", type=int, default=2, help="processes spinning on the CPU meanwhile")
    args = parser.parse_args()
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    for spinner in spinners:
        spinner.start()
    started = time.perf_counter()
    completed = 0
    false_success = 0
    try:
        for index in range(1, args.runs + 1):
            code, ok, last = one_run(index)
            completed += ok
            false_success += code == 0 and not ok
            print(f"run {index:3d}: exit {code} {'completed' if ok else 'NOT completed'} — {last[:100]}", flush=True)
    finally:
        for spinner in spinners:
            spinner.terminate()
    print(
        f"{completed} of {args.runs} runs completed ({false_success} exited 0 without completing) "
        f"in {time.perf_counter() - started:.0f} s with {args.busy} busy processes"
    )
    return 0 if completed == args.runs and not false_success else 1


if __name__ == "__main__":
    raise SystemExit(main())
