"""run-notebook kill soak (not run in CI): the notebook and its kernel SIGKILLed at many random cells.

    python tests/stress/run_notebook_kill_soak.py --kills 20

The suite's tests/test_run_notebook_kills.py kills 6 times; this runs the same check (every
committed cell restored, only a cell killed after its effect run again, the output notebook as an
uninterrupted run's) with as many kills as asked, on a new SQLite store or the one given.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from test_run_notebook_kills import kill_and_rerun


def main() -> int:
    """Kill and rerun until the requested number of kills; report the first broken promise."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--store", help="store URL (default: a new SQLite file in a temporary folder)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="durable-nb-notebook-soak-"))
    os.chdir(folder)
    store_url = args.store or f"sqlite:///{folder}/runs.db"
    started = time.monotonic()
    try:
        kill_and_rerun(folder / "work", store_url, random.Random(args.seed), args.kills)
    except AssertionError as error:
        print(f"FAILED (seed {args.seed}, folder {folder}): {error}")
        return 1
    print(f"ok: {args.kills} kills, {time.monotonic() - started:.0f} s (seed {args.seed})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
