"""Map items on a Dask cluster survive crashes (issue 20 item 5, crash half).

Owners killed and recovered, workers killed and retried, a cancel from another process and a
timeout: an item is committed only when it finishes, and its events tell what happened.

A real ``LocalCluster`` (two worker processes, one thread each) serves the module. Every run's
owner is a child process connecting to it by address, so it can be SIGKILLed like a real one.
Each item body appends ``"<owner> <index>"`` to a file with one O_APPEND write: the count of body
runs survives any kill, and each line names the owner that handed the item out (0 for the first
owner, 1 for the one after it, ...) even when the body finished on a worker after that owner died.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import select
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "distributed",
    reason="the executor crash tests need dask.distributed: pip install 'durable-nb[dask]'",
)

import dask
from conftest import db_path, env_with_repo, execute_sql, is_postgres
from distributed import Client, LocalCluster

import durable_nb as dnb

pytestmark = pytest.mark.slow

# How long a wait on real processes may take before the test fails (never reached when all is well).
PATIENCE = 120.0

OWNER = '''
"""An owner of one map run on a Dask cluster: starts, recovers or resumes it as the test says."""
import json, os, sys, time

import durable_nb as dnb
from distributed import Client

CONFIG = json.loads(open(sys.argv[1]).read())
OWNER = sys.argv[2]


def append(path, line):
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\\n").encode())
    finally:
        os.close(fd)


def hold_first_attempt():
    """Tell the test this worker's pid, then wait for a release that may never come."""
    mine = "%s.%d" % (CONFIG["started"], os.getpid())
    with open(mine, "w") as handle:
        handle.write(str(os.getpid()))
    try:
        os.link(mine, CONFIG["started"])
    except FileExistsError:
        return  # a later attempt runs straight through
    finally:
        os.unlink(mine)
    deadline = time.monotonic() + 120
    while not os.path.exists(CONFIG["release"]):
        if time.monotonic() > deadline:
            raise TimeoutError("the test never released this item")
        time.sleep(0.02)
    append(CONFIG["late"], str(os.getpid()))


client = Client(CONFIG["scheduler"], timeout="60s")
flow = dnb.Workflow(CONFIG["name"], store=CONFIG["store"])

if CONFIG["commit_delay"]:
    # A slow store (a far database, a slow disk): every commit takes this much longer.
    import asyncio

    store = flow.store
    commit = store.commit

    async def slow_commit(*args, **kwargs):
        await asyncio.sleep(CONFIG["commit_delay"])
        return await commit(*args, **kwargs)

    store.commit = slow_commit


@flow.node(retry_count=0)
def load(state):
    return {"docs": list(range(CONFIG["items"]))}


@flow.map(
    after="load",
    items="docs",
    into="out",
    executor=client,
    retry_count=CONFIG["retry_count"],
    timeout_seconds=CONFIG["timeout_seconds"],
    max_concurrency=CONFIG["max_concurrency"],
)
def work(state, doc):
    append(CONFIG["bodies"], "%s %d" % (OWNER, doc))
    if doc == CONFIG["victim"]:
        hold_first_attempt()
    time.sleep(CONFIG["item_seconds"])
    return doc * 2


if __name__ == "__main__":
    command = sys.argv[3]
    if command == "run":
        run = flow.run({}, idempotency_key=sys.argv[4])
    elif command == "recover":
        (run,) = dnb.recover([flow]).resumed
    else:
        run = flow.resume(sys.argv[4])
    print(json.dumps({"run_id": run.id, "status": run.status, "error": run.error}), flush=True)
    if CONFIG["hold"]:
        sys.stdin.read()  # the test looks at the cluster while this owner and its client still live
    client.close()
'''


def wait_until(
    predicate: Callable[[], bool],
    what: str,
    child: subprocess.Popen[str] | None = None,
    found: Callable[[], object] | None = None,
    patience: float = PATIENCE,
) -> None:
    """Poll ``predicate`` until it holds; fail if ``child`` exits first or nothing happens for
    ``patience`` seconds (saying what ``found`` then returns)."""
    deadline = time.monotonic() + patience
    while not predicate():
        if child is not None and child.poll() is not None:
            _, err = child.communicate()
            raise AssertionError(f"the owner exited ({child.returncode}) before {what}:\n{err}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {patience:.0f} s for {what}" + (f"; found {found()!r}" if found else ""))
        time.sleep(0.005)


def _task_keys(dask_scheduler: Any) -> list[str]:
    return [str(key) for key in dask_scheduler.tasks]


def _task_states(dask_scheduler: Any) -> list[tuple[str, str, list[str]]]:
    return [
        (str(key), str(task.state), sorted(str(client.client_key) for client in task.who_wants or ()))
        for key, task in dask_scheduler.tasks.items()
    ]


def _worker_pids(dask_scheduler: Any) -> list[int]:
    return [int(worker.pid) for worker in dask_scheduler.workers.values()]


def _scattered_holders(dask_scheduler: Any) -> list[list[int]]:
    # A map's shared part (its function and state) is the result of a task keyed "<label>-shared-<token>".
    return [
        sorted(int(worker.pid) for worker in task.who_has or ())
        for key, task in dask_scheduler.tasks.items()
        if "-shared-" in str(key) and task.who_has
    ]


@dataclass
class Cluster:
    """A running LocalCluster and a client of the test's own, which submits nothing."""

    cluster: LocalCluster
    client: Client

    @property
    def address(self) -> str:
        return str(self.cluster.scheduler_address)

    def tasks(self) -> list[str]:
        """Return the keys the scheduler holds (tasks and scattered data) for any client."""
        return list(self.client.run_on_scheduler(_task_keys))

    def worker_pids(self) -> set[int]:
        """Return the pids of the worker processes the scheduler knows."""
        return set(self.client.run_on_scheduler(_worker_pids))

    def shared_holders(self) -> list[list[int]]:
        """Return, for each piece of scattered data (a map's shared part), the pids of the workers holding it."""
        return list(self.client.run_on_scheduler(_scattered_holders))

    def settle(self, gone: int | None = None) -> None:
        """Wait until two workers serve (neither of them ``gone``) and no task is left from a test."""
        wait_until(
            lambda: len(pids := self.worker_pids()) == 2 and gone not in pids,
            f"two live workers (not the killed {gone})" if gone is not None else "two live workers",
            found=self.worker_pids,
        )
        self.wait_idle()

    def wait_idle(self, child: subprocess.Popen[str] | None = None, patience: float = PATIENCE) -> None:
        """Wait until the scheduler holds no task or data of any client (``child``: an owner still alive)."""
        wait_until(lambda: not self.tasks(), "the scheduler to hold no task", child, self.task_states, patience)

    def task_states(self) -> list[tuple[str, str, list[str]]]:
        """Return each key the scheduler holds with its state and the clients that want it."""
        return list(self.client.run_on_scheduler(_task_states))


def start_cluster() -> Cluster:
    # The active memory manager drops spare replicas every 2 s on its own; here the tests drop
    # them (client.amm.run_once()) so which worker holds a map's shared part at a kill is known.
    with dask.config.set({"distributed.scheduler.active-memory-manager.start": False}):
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0")
    return Cluster(cluster, Client(cluster))


def stop_cluster(found: Cluster) -> None:
    found.client.close()
    found.cluster.close()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """The module's cluster: Dask's default allowed-failures (a task whose worker died runs again, up to 3 times)."""
    found = start_cluster()
    yield found
    stop_cluster(found)


@pytest.fixture(scope="module")
def strict_cluster() -> Iterator[Cluster]:
    """A cluster whose scheduler gives up on a task at its first dead worker (KilledWorker)."""
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        found = start_cluster()
    yield found
    stop_cluster(found)


class Owners:
    """The owners of one map run, each a child process on the same store and cluster."""

    def __init__(self, folder: Path, store_url: str, cluster: Cluster, **config: Any) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.store_url = store_url
        self.cluster = cluster
        self.bodies_file = folder / "bodies.txt"
        self.started = folder / "started.pid"
        self.release = folder / "release"
        self.late = folder / "late.txt"
        settings = {
            "name": "dask-crash",
            "store": store_url,
            "scheduler": cluster.address,
            "bodies": str(self.bodies_file),
            "started": str(self.started),
            "release": str(self.release),
            "late": str(self.late),
            "items": 10,
            "item_seconds": 0.0,
            "victim": None,
            "retry_count": 1,
            "timeout_seconds": None,
            "max_concurrency": None,
            "commit_delay": 0,
            "hold": False,
        }
        unknown = set(config) - set(settings)
        assert not unknown, unknown
        settings.update(config)
        self.items = int(settings["items"])
        self.name = str(settings["name"])
        self.config = folder / "owner.json"
        self.config.write_text(json.dumps(settings))
        self.script = folder / "dask_owner.py"
        self.script.write_text(OWNER)
        self.children: list[subprocess.Popen[str]] = []

    def start(self, owner: int, *args: str) -> subprocess.Popen[str]:
        """Start owner number ``owner``: ``run KEY``, ``recover`` or ``resume RUN_ID``."""
        child = subprocess.Popen(
            [sys.executable, str(self.script), str(self.config), str(owner), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env_with_repo(),
        )
        self.children.append(child)
        return child

    def close(self) -> None:
        """After a failed test: stop the owners it left running and release a held item."""
        self.release.touch()
        for child in self.children:
            if child.poll() is None:
                os.kill(child.pid, signal.SIGKILL)
                child.communicate()

    def result(self, child: subprocess.Popen[str]) -> dict[str, Any]:
        """Read the line an owner prints when its run returns (it may stay alive afterwards)."""
        assert child.stdout is not None
        deadline = time.monotonic() + PATIENCE
        while not select.select([child.stdout], [], [], 0.1)[0]:
            if child.poll() is not None:
                break
            if time.monotonic() > deadline:
                raise TimeoutError("the owner's run did not return")
        line = child.stdout.readline()
        if not line:
            _, err = child.communicate()
            raise AssertionError(f"the owner failed ({child.returncode}):\n{err}")
        return dict(json.loads(line))

    def finish(self, child: subprocess.Popen[str], outcome: dict[str, Any] | None = None) -> dict[str, Any]:
        """Let an owner go (closing its stdin) and return what its run came to (``outcome``, if read)."""
        outcome = outcome or self.result(child)
        _, err = child.communicate(timeout=PATIENCE)
        assert child.returncode == 0, err
        return outcome

    def kill(self, child: subprocess.Popen[str]) -> None:
        """SIGKILL an owner; return once nothing it sent can still be committed."""
        assert child.poll() is None, "the owner finished before the test could kill it"
        postgres = is_postgres(self.store_url)
        if postgres:
            assert self._sessions() > 0, "the owner's PostgreSQL sessions are not recognised by their name"
        os.kill(child.pid, signal.SIGKILL)
        child.communicate()
        if postgres:
            # A COMMIT the owner sent just before dying still lands unless its session is gone:
            # what the store holds is final only once the server has ended the dead owner's sessions.
            wait_until(lambda: self._sessions() == 0, "the dead owner's PostgreSQL sessions to end")

    def _sessions(self) -> int:
        from durable_nb.store.postgres import _split

        # durable_nb names its PostgreSQL sessions after the store's schema (the test's own).
        _, options = _split(self.store_url)
        name = f"durable-nb:{options['schema']}"
        rows = execute_sql(self.store_url, "SELECT count(*) FROM pg_stat_activity WHERE application_name = ?", (name,))
        return int(rows[0][0])

    def bodies(self) -> list[tuple[int, int]]:
        """Return the body runs so far as (owner, item index), in the order they started."""
        if not self.bodies_file.exists():
            return []
        # A line still being written has no newline yet: it is not counted.
        lines = self.bodies_file.read_text().split("\n")[:-1]
        return [(int(owner), int(index)) for owner, index in (line.split() for line in lines)]

    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        # The first owner may not have created the store's tables yet: no rows.
        if is_postgres(self.store_url):
            from psycopg.errors import InvalidSchemaName, UndefinedTable

            missing: tuple[type[Exception], ...] = (InvalidSchemaName, UndefinedTable)
        else:
            if not Path(db_path(self.store_url)).exists():
                return []  # connecting would create an empty file before the owner does
            missing = (sqlite3.OperationalError,)
        try:
            return execute_sql(self.store_url, sql, params)
        except missing:
            return []

    def run_id(self) -> str | None:
        rows = self._rows("SELECT run_id FROM runs WHERE name = ?", (self.name,))
        return str(rows[0][0]) if rows else None

    def item_commits(self) -> list[int]:
        """Return the item index of every committed item checkpoint of the map (repeats kept)."""
        rows = self._rows(
            "SELECT c.item_index FROM checkpoints c JOIN runs r ON r.run_id = c.run_id "
            "WHERE r.name = ? AND c.step = 'after:work' AND c.item_index IS NOT NULL",
            (self.name,),
        )
        return [int(row[0]) for row in rows]

    def committed(self) -> set[int]:
        return set(self.item_commits())

    def check_each_item_committed_once(self, run_id: str) -> None:
        """Every item has exactly one committed checkpoint, and ``out`` holds every result in order."""
        counts = Counter(self.item_commits())
        assert set(counts) == set(range(self.items)), sorted(set(range(self.items)) - set(counts))[:20]
        assert set(counts.values()) == {1}, {i: n for i, n in counts.items() if n != 1}
        run = dnb.get_run(run_id, store=self.store_url)
        assert run.status == "completed", (run.status, run.error)
        assert run.state["out"] == [2 * i for i in range(self.items)]


@pytest.fixture
def make_owners(tmp_path: Path, store_url: str) -> Iterator[Callable[..., Owners]]:
    """Make the owners of a test's run on its store; whatever they leave running is stopped after it."""
    made: list[Owners] = []

    def make(cluster: Cluster, **config: Any) -> Owners:
        owners = Owners(tmp_path / f"run-{len(made)}", store_url, cluster, **config)
        made.append(owners)
        return owners

    yield make
    for owners in made:
        owners.close()


def events_of(store_url: str, run_id: str) -> list[dict[str, Any]]:
    frame = dnb.events(run_id, store=store_url)
    return [
        {"seq": int(seq), "type": str(kind), "node_id": node, "data": data or {}}
        for seq, kind, node, data in zip(frame["seq"], frame["type"], frame["node_id"], frame["data"], strict=True)
    ]


# The suite kills the owner 3 times in a 300-item map; tests/stress/executor_kill_soak.py runs the
# same check with more kills on a bigger map (10 kills in 1,000 items, as CI once did).
KILLS = 3
KILL_ITEMS = 300
KILL_CONCURRENCY = 16


def test_owner_killed_repeatedly_repeats_only_items_in_flight(
    store_url: str, make_owners: Callable[..., Owners], cluster: Cluster
) -> None:
    """Issue 20 item 5 (recovery): an owner SIGKILLed at seeded random points of a map on Dask, each
    time recovered by a new owner: the run completes with every result, each item has exactly one
    committed checkpoint, no item committed before a kill runs after it, the items that ran again
    are those the killed owners had started and not committed, and there are at most
    kills x max_concurrency of them."""
    cluster.settle()
    owners = make_owners(cluster, items=KILL_ITEMS, item_seconds=0.01, max_concurrency=KILL_CONCURRENCY)
    kill_owners_and_check(owners, store_url, random.Random(20261201), KILLS, KILL_ITEMS, KILL_CONCURRENCY)


def kill_owners_and_check(
    owners: Owners, store_url: str, rng: random.Random, kills: int, items: int, concurrency: int
) -> None:
    """Kill the map's owner ``kills`` times (20 to 80 more items committed each time), recover, check."""
    # The committed items as each kill left them, read after the owner was dead.
    at_kill: list[set[int]] = []
    for owner in range(kills):
        child = owners.start(owner, "run", "kills") if owner == 0 else owners.start(owner, "recover")
        target = len(at_kill[-1] if at_kill else ()) + rng.randint(20, 80)
        wait_until(lambda: len(owners.committed()) >= target, f"{target} committed items", child)  # noqa: B023
        owners.kill(child)
        at_kill.append(owners.committed())
    final = owners.finish(owners.start(kills, "recover"))
    assert final["status"] == "completed", final
    owners.check_each_item_committed_once(final["run_id"])

    runs = owners.bodies()
    assert {index for _, index in runs} == set(range(items))
    assert all(earlier <= later for earlier, later in itertools.pairwise(at_kill))
    # Owner n starts after kill n-1: nothing committed by then may run again.
    rerun = [(owner, index) for owner, index in runs if owner > 0 and index in at_kill[owner - 1]]
    assert not rerun, rerun[:20]
    # One owner hands an item out once (no attempt failed): a repeat is a run by a later owner.
    assert set(Counter(runs).values()) == {1}, [r for r, n in Counter(runs).items() if n > 1][:20]
    # What each kill lost: items its owner had started and not committed; each ran again later.
    lost = [{index for owner, index in runs if owner == killed} - at_kill[killed] for killed in range(kills)]
    repeats = sum(n - 1 for n in Counter(index for _, index in runs).values())
    assert repeats == sum(len(gone) for gone in lost), (repeats, [len(gone) for gone in lost])
    assert repeats <= kills * concurrency, (repeats, [len(gone) for gone in lost])
    events = events_of(store_url, final["run_id"])
    assert not [e for e in events if e["type"] == "node_retrying"]
    # Every item but the last to finish has its own event; the last one's commit is the map's.
    finished = Counter(
        e["data"]["item_index"] for e in events if e["type"] == "node_finished" and "item_index" in e["data"]
    )
    assert len(finished) == items - 1 and set(finished.values()) == {1}, "an item finished twice in the log"


VICTIM = 3
WORKER_ITEMS = 8


def kill_victims_worker(owners: Owners, cluster: Cluster, child: subprocess.Popen[str], only_copy: bool) -> int:
    """SIGKILL the worker running the victim item once every other item is committed; return its pid.

    ``only_copy``: first drop the other worker's replica of the map's shared part, so the dying
    worker holds the only one; otherwise both workers hold it (each ran items of the map).
    """
    wait_until(owners.started.exists, "the victim item to start", child)
    pid = int(owners.started.read_text())
    assert pid in cluster.worker_pids()
    others = set(range(WORKER_ITEMS)) - {VICTIM}
    # With the others committed, nothing of theirs waits on the dying worker to be fetched.
    wait_until(lambda: owners.committed() == others, "the other items to be committed", child)
    # The owner releases each result it fetched, but the release reaches the scheduler later: a result
    # it still holds when its worker dies is computed again (its body runs twice) for nobody.
    wait_until(
        lambda: len([key for key in cluster.tasks() if "-shared-" not in key]) == 1,
        "the scheduler to hold the victim's task alone",
        child,
        cluster.task_states,
    )
    if only_copy:
        cluster.client.amm.run_once()
        wait_until(lambda: cluster.shared_holders() == [[pid]], "the shared part to be on the victim's worker only")
    elif cluster.shared_holders():  # a small shared part travels with each item: nothing to wait for
        both = sorted(cluster.worker_pids())
        wait_until(lambda: cluster.shared_holders() == [both], "the shared part to be on both workers")
    os.kill(pid, signal.SIGKILL)
    return pid


def check_victim_ran_twice_and_committed_once(owners: Owners, outcome: dict[str, Any]) -> None:
    assert outcome["status"] == "completed", outcome
    owners.check_each_item_committed_once(outcome["run_id"])
    runs = Counter(index for _, index in owners.bodies())
    assert runs == Counter({**dict.fromkeys(range(WORKER_ITEMS), 1), VICTIM: 2}), runs


@pytest.mark.parametrize("dask_reruns", [False, True], ids=["killedworker-retried", "dask-reruns"])
def test_worker_killed_mid_item_commits_it_once(
    store_url: str, make_owners: Callable[..., Owners], dask_reruns: bool, request: pytest.FixtureRequest
) -> None:
    """Issue 20 item 5 (retries): the worker running an item is SIGKILLed mid-item. With Dask's
    allowed-failures=0 the death reaches durable_nb as KilledWorker, one failed attempt that its
    retry policy runs again (a node_retrying event); with Dask's default the scheduler runs the
    task again itself. Either way the item's body ran twice, the others' once, and each item is
    committed exactly once."""
    cluster: Cluster = request.getfixturevalue("cluster" if dask_reruns else "strict_cluster")
    cluster.settle()
    owners = make_owners(cluster, items=WORKER_ITEMS, victim=VICTIM, retry_count=1)
    child = owners.start(0, "run", "worker-kill")
    pid = kill_victims_worker(owners, cluster, child, only_copy=False)
    outcome = owners.finish(child)
    check_victim_ran_twice_and_committed_once(owners, outcome)
    retrying = [e for e in events_of(store_url, outcome["run_id"]) if e["type"] == "node_retrying"]
    if dask_reruns:
        assert not retrying, retrying
    else:
        assert [e["data"]["item_index"] for e in retrying] == [VICTIM], retrying
        assert "KilledWorker" in retrying[0]["data"]["error"], retrying
    cluster.settle(gone=pid)


def test_cancel_mid_map_stops_commits_and_resume_runs_the_rest(
    store_url: str, make_owners: Callable[..., Owners], cluster: Cluster
) -> None:
    """Issue 20 item 5 (cancel): dnb.cancel from another process while a 200-item map runs on
    Dask: the run is cancelled, no item is committed after the cancel's commit, far fewer than 200
    bodies ran, and resume then runs exactly the items not committed, each once."""
    cluster.settle()
    owners = make_owners(cluster, items=200, item_seconds=0.05)
    child = owners.start(0, "run", "cancel")
    wait_until(lambda: len(owners.committed()) >= 5, "5 committed items", child)
    run_id = owners.run_id()
    assert run_id is not None
    assert dnb.cancel(run_id, store=store_url).status == "cancelled"
    at_cancel = owners.committed()
    outcome = owners.finish(child)
    assert (outcome["status"], outcome["error"]) == ("cancelled", "Cancelled by user")
    assert owners.committed() == at_cancel
    events = events_of(store_url, run_id)
    (cancelled,) = [e["seq"] for e in events if e["type"] == "run_cancelled"]
    assert all(e["seq"] < cancelled for e in events if e["type"] == "node_finished")
    first = owners.bodies()
    assert len(first) < 100, len(first)

    resumed = owners.finish(owners.start(1, "resume", run_id))
    assert resumed["status"] == "completed", resumed
    owners.check_each_item_committed_once(run_id)
    second = Counter(index for owner, index in owners.bodies() if owner == 1)
    assert set(second) == set(range(200)) - at_cancel
    assert set(second.values()) == {1}


TIMED_OUT = 1


def test_item_timeout_cancels_its_dask_future_and_drops_late_result(
    store_url: str, make_owners: Callable[..., Owners], cluster: Cluster
) -> None:
    """Issue 20 item 5 (timeouts): an item that blocks past timeout_seconds (retry_count=0) fails the
    run with NodeTimeout at the owner; the scheduler forgets its task while the body still runs
    on the worker, and the result it returns later is never committed."""
    cluster.settle()
    owners = make_owners(cluster, items=4, victim=TIMED_OUT, retry_count=0, timeout_seconds=3, hold=True)
    child = owners.start(0, "run", "timeout")
    outcome = owners.result(child)
    assert outcome["status"] == "failed", outcome
    assert "timed out after 3" in outcome["error"], outcome
    assert owners.started.exists()
    cluster.wait_idle(child)  # the timed-out item's task (and the map's shared part) left the cluster
    # The body is still waiting for its release on the worker: only the future was cancelled.
    assert not owners.late.exists()
    owners.release.touch()
    wait_until(owners.late.exists, "the late body to finish", child)
    owners.finish(child, outcome)
    run_id = outcome["run_id"]
    assert owners.committed() == set(range(4)) - {TIMED_OUT}
    failed = execute_sql(
        store_url, "SELECT error_type, error FROM checkpoints WHERE run_id = ? AND step = 'failed:work'", (run_id,)
    )
    assert [row[0] for row in failed] == ["NodeTimeout"], failed
    assert dnb.get_run(run_id, store=store_url).status == "failed"
    assert Counter(index for _, index in owners.bodies()) == Counter(range(4))
