"""Crash recovery with real kills: SIGKILL at random moments, recover, count bodies and @idempotent calls."""

from __future__ import annotations

import random
import sqlite3
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from crashkit import CrashFlow

pytestmark = pytest.mark.slow

# A short version of tests/stress/crash_soak.py (hundreds of kills, not run in CI): every kind of
# kill (of a first run, of a recoverer, one to three in a row) still happens within ten.
MIN_KILLS = 10
MAX_TRIALS = 15


@dataclass(frozen=True)
class Snapshot:
    """What a kill left: the committed nodes and how often each body had run."""

    committed: set[str]
    bodies: Counter[str]
    charges: Counter[str]


def run_trial(flow: CrashFlow, key: str, kills_wanted: int, rng: random.Random) -> list[Snapshot]:
    """Run once, kill; recover (killing recoverers too) until complete; return what each kill left."""
    snapshots: list[Snapshot] = []

    def snapshot() -> None:
        snapshots.append(Snapshot(flow.committed_nodes(), flow.counts(), flow.counts(flow.charges)))

    child = flow.start("run", key)
    if flow.kill_after_progress(child, rng.uniform(0, 0.15)):
        snapshot()
    else:
        flow.finish(child)
    while len(snapshots) < kills_wanted:
        recoverer = flow.start("recover")
        if not flow.kill_after_progress(recoverer, rng.uniform(0, 0.1)):
            flow.finish(recoverer)
            break
        snapshot()
    flow.finish(flow.start("recover"))
    return snapshots


def check_promises(flow: CrashFlow, snapshots: list[Snapshot], label: object) -> None:
    """No body of a node committed before a kill runs after it; each kill repeats at most one body."""
    bodies = flow.counts()
    charges = flow.counts(flow.charges)
    assert set(bodies) == {str(i) for i in range(flow.nodes)}, label
    for snap in snapshots:
        for node in snap.committed:
            index = str(int(node[1:]))
            assert bodies[index] == snap.bodies[index], (label, node, "body ran again after its commit")
            assert charges[index] == snap.charges[index], (label, node, "@idempotent body ran again")
    assert sum(v - 1 for v in bodies.values()) <= len(snapshots), (label, bodies)
    assert sum(v - 1 for v in charges.values()) <= len(snapshots), (label, charges)
    assert flow.integrity() == "ok"


def test_random_kills_lose_at_most_the_node_in_flight(tmp_path: Path) -> None:
    """Over 10+ SIGKILLs, every run completes; committed bodies never run again; only the node
    in flight at a kill may run twice; @idempotent bodies of committed nodes ran once; the file is intact."""
    rng = random.Random(20261129)
    total_kills = trial = 0
    while total_kills < MIN_KILLS and trial < MAX_TRIALS:
        trial += 1
        flow = CrashFlow(tmp_path / f"trial-{trial}")
        snapshots = run_trial(flow, f"trial-{trial}", 1 + trial % 3, rng)
        total_kills += len(snapshots)
        with sqlite3.connect(flow.db) as conn:
            statuses = [row[0] for row in conn.execute("SELECT status FROM runs")]
            steps = [row[0] for row in conn.execute("SELECT step FROM checkpoints ORDER BY seq")]
        assert statuses == ["completed"], (trial, statuses)
        assert steps[-1] == "run_end"
        assert sorted(s for s in steps if s.startswith("after:")) == [f"after:n{i:02d}" for i in range(20)]
        check_promises(flow, snapshots, trial)
    assert total_kills >= MIN_KILLS


def test_events_after_kill_and_resume_have_no_gaps_or_repeats(tmp_path: Path) -> None:
    """After a kill and a resume, event seqs are gap-free and no committed node finishes twice."""
    rng = random.Random(7)
    for attempt in range(3):
        flow = CrashFlow(tmp_path / f"events-{attempt}")
        snapshots = run_trial(flow, "events", 1, rng)
        with sqlite3.connect(flow.db) as conn:
            events = conn.execute("SELECT seq, type, node_id FROM events ORDER BY seq").fetchall()
        assert [e[0] for e in events] == list(range(1, len(events) + 1))
        finished = Counter(e[2] for e in events if e[1] == "node_finished")
        assert all(count == 1 for count in finished.values()), finished
        assert len(finished) == 20
        started = Counter(e[2] for e in events if e[1] == "node_started")
        repeated = [node for node, count in started.items() if count > 1]
        assert len(repeated) <= len(snapshots)
        for node in repeated:
            assert all(node not in snap.committed for snap in snapshots)
        types = [e[1] for e in events]
        assert types.count("run_started") == 1 and types[-1] == "run_completed"
