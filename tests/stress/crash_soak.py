"""Long crash soak (not run in CI): hundreds of SIGKILLs against the crash workflow.

python tests/stress/crash_soak.py --kills 300
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from crashkit import CrashFlow
from test_crash_recovery import check_promises, run_trial


def main() -> int:
    """Kill and recover until the requested number of kills; stop at the first broken promise."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=300)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    folder = Path(tempfile.mkdtemp(prefix="durable-nb-soak-"))
    kills = trials = 0
    started = time.monotonic()
    while kills < args.kills:
        flow = CrashFlow(folder / f"trial-{trials}")
        snapshots = run_trial(flow, f"soak-{trials}", 1 + rng.randrange(4), rng)
        try:
            check_promises(flow, snapshots, trials)
        except AssertionError as error:
            print(f"\nFAILED trial {trials} (seed {args.seed}): {error}")
            return 1
        kills += len(snapshots)
        trials += 1
        print(f"\r{kills} kills, {trials} runs, {time.monotonic() - started:.0f} s", end="", flush=True)
    print(f"\nok: {kills} kills over {trials} runs, every promise held (seed {args.seed})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
