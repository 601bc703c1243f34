"""Owner kill soak (not run in CI): a map on a Dask cluster whose owner is SIGKILLed many times.

    python tests/stress/executor_kill_soak.py --kills 10 --items 1000
    python tests/stress/executor_kill_soak.py --store postgresql://postgres@127.0.0.1:5432/test?schema=soak

The suite's tests/test_executor_crashes.py kills the owner 3 times in a 300-item map; this runs
the same check (each item committed once, only items in flight run again) at any size.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from test_executor_crashes import KILL_CONCURRENCY, Owners, kill_owners_and_check, start_cluster, stop_cluster


def main() -> int:
    """Run one map, kill its owner ``--kills`` times, recover it and check every promise."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--store", help="store URL (default: a new SQLite file in a temporary folder)")
    args = parser.parse_args()
    if args.items < 80 * args.kills + 1:
        parser.error("--items must exceed 80 x --kills: each kill waits for up to 80 more committed items")
    folder = Path(tempfile.mkdtemp(prefix="durable-nb-executor-soak-"))
    store_url = args.store or f"sqlite:///{folder}/runs.db"
    cluster = start_cluster()
    started = time.monotonic()
    owners = Owners(
        folder / "run", store_url, cluster, items=args.items, item_seconds=0.01, max_concurrency=KILL_CONCURRENCY
    )
    try:
        cluster.settle()
        kill_owners_and_check(owners, store_url, random.Random(args.seed), args.kills, args.items, KILL_CONCURRENCY)
    except AssertionError as error:
        print(f"FAILED (seed {args.seed}, folder {folder}): {error}")
        return 1
    finally:
        owners.close()
        stop_cluster(cluster)
    print(f"ok: {args.kills} kills in {args.items} items, {time.monotonic() - started:.0f} s (seed {args.seed})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
