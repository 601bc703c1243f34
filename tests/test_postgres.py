"""PostgreSQL under load (issue: many kernels, processes and machines): races, crashes, lost connections.

Skipped with a message saying how to enable them when no server is configured; CI runs them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import NO_POSTGRES, _drop_schema, env_with_repo, execute_sql, postgres_base

import durable_nb as dnb
from durable_nb.store import disconnect

pytestmark = pytest.mark.slow


@pytest.fixture
def pg_url() -> Iterator[str]:
    base = postgres_base()
    if base is None:
        pytest.skip(NO_POSTGRES)
    schema = f"t_{uuid.uuid4().hex[:12]}"
    url = f"{base}{'&' if '?' in base else '?'}schema={schema}"
    yield url
    disconnect(url)
    _drop_schema(schema)


def module(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return path


def start(path: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    environment = env_with_repo()
    environment["PYTHONPATH"] = str(path.parent) + os.pathsep + environment["PYTHONPATH"]
    environment.update(env)
    return subprocess.Popen(
        [sys.executable, str(path), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment
    )


RACE = """
import os, sys, time
import durable_nb as dnb

URL = {url!r}
SIDE = {side!r}
flow = dnb.Workflow("race", store=URL)


def note(line):
    fd = os.open(SIDE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, (line + "\\n").encode())
    os.close(fd)


@flow.node(retry_count=0)
def review(state):
    decision = dnb.gate("ok?")
    note(f"{{state['trial']}} review")
    return {{"by": decision.comment}}


@flow.node(after="review", retry_count=0)
def ship(state):
    note(f"{{state['trial']}} ship")
    return {{"shipped": True}}


if __name__ == "__main__":
    me = sys.argv[1]
    folder = sys.argv[2]
    flow.get  # warm the store up before the races
    print("ready", flush=True)
    for trial in range(int(sys.argv[3])):
        go = os.path.join(folder, f"go-{{trial}}")
        while not os.path.exists(go):
            time.sleep(0.001)
        run_id = open(go).read().strip()
        try:
            run = flow.approve(run_id, comment=me)
            print(f"{{trial}} won {{run.status}}", flush=True)
        except dnb.AlreadyResumed:
            print(f"{{trial}} lost", flush=True)
"""


def test_sixteen_processes_race_to_approve(tmp_path: Path, pg_url: str) -> None:
    """16 processes approve the same paused run at once, 20 trials: one winner each time, the gated
    node runs once."""
    side = tmp_path / "side.txt"
    path = module(tmp_path, "race_flow", RACE.format(url=pg_url, side=str(side)))
    trials, racers = 20, 16
    sys.path.insert(0, str(tmp_path))
    try:
        import race_flow

        flow = race_flow.flow
        children = [start(path, f"p{i}", str(tmp_path), str(trials)) for i in range(racers)]
        for child in children:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        run_ids = []
        for trial in range(trials):
            run = flow.run({"trial": trial})
            assert run.status == "paused"
            run_ids.append(run.id)
            (tmp_path / f"go-{trial}.tmp").write_text(run.id)
            os.rename(tmp_path / f"go-{trial}.tmp", tmp_path / f"go-{trial}")
        outputs = [child.communicate(timeout=300) for child in children]
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("race_flow", None)
    for child, (_, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err
    lines = [line.split() for out, _ in outputs for line in out.splitlines()]
    for trial, run_id in enumerate(run_ids):
        results = [words[1:] for words in lines if words[0] == str(trial)]
        assert len(results) == racers
        assert sum(r[0] == "won" for r in results) == 1, results
        assert all(r == ["lost"] for r in results if r[0] != "won")
        assert dnb.get_run(run_id, store=pg_url).status == "completed"
        bodies = side.read_text().split("\n")
        assert bodies.count(f"{trial} review") == 1
        assert bodies.count(f"{trial} ship") == 1
        steps = list(dnb.history(run_id, store=pg_url)["step"])
        assert steps.count("approved:review") == 1


WORKER = """
import sys
import durable_nb as dnb

flow = dnb.Workflow("load", store={url!r})
previous = None
for index in range(10):
    def step(state, index=index):
        return {{f"n{{index}}": state.get("worker", "") + str(index)}}
    step.__name__ = f"n{{index}}"
    flow.node(step, after=previous, retry_count=0)
    previous = step.__name__

if __name__ == "__main__":
    worker = sys.argv[1]
    done = sum(flow.run({{"worker": worker}}).status == "completed" for _ in range(50))
    print(done, flush=True)
"""


def test_eight_processes_fifty_workflows_each(tmp_path: Path, pg_url: str) -> None:
    """8 processes run 50 ten-node workflows each at once: all complete, no checkpoint lost or
    doubled, seqs gap-free."""
    path = module(tmp_path, "load_flow", WORKER.format(url=pg_url))
    children = [start(path, f"w{i}") for i in range(8)]
    outputs = [child.communicate(timeout=600) for child in children]
    for child, (out, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err
        assert out.strip() == "50"
    runs = dnb.runs(store=pg_url)
    assert len(runs) == 400 and set(runs["status"]) == {"completed"}
    rows = execute_sql(pg_url, "SELECT run_id, seq, step FROM checkpoints ORDER BY run_id, seq")
    by_run: dict[str, list[tuple[int, str]]] = {}
    for run_id, seq, step in rows:
        by_run.setdefault(run_id, []).append((seq, step))
    assert len(by_run) == 400
    for checkpoints in by_run.values():
        assert [seq for seq, _ in checkpoints] == list(range(1, 12))
        assert [step for _, step in checkpoints] == [f"after:n{i}" for i in range(10)] + ["run_end"]
    gaps = execute_sql(
        pg_url,
        "SELECT run_id FROM events GROUP BY run_id HAVING MAX(seq) <> COUNT(*) OR MIN(seq) <> 1",
    )
    assert gaps == []


SLOW = """
import os, sys, time
import durable_nb as dnb

flow = dnb.Workflow("slow", store={url!r})
MARK = {mark!r}


@flow.node(retry_count=0)
def first(state):
    return {{"first": True}}


@flow.node(after="first", retry_count=0)
def slow(state):
    with open(MARK, "a") as handle:
        handle.write(f"{{state['who']}} {{os.getpid()}}\\n")
    time.sleep(float(os.environ.get("SLOW_SECONDS", "3")))
    return {{"slow": True}}


if __name__ == "__main__":
    if sys.argv[1] == "run":
        print(flow.run({{"who": sys.argv[2]}}).status, flush=True)
    else:
        deadline = time.monotonic() + float(sys.argv[2])
        resumed = set()
        while time.monotonic() < deadline:
            resumed.update(r.id for r in dnb.recover([flow]).resumed)
            time.sleep(0.2)
        print(" ".join(sorted(resumed)), flush=True)
"""


def wait_for(predicate, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_killed_worker_is_recovered_by_another_machine(tmp_path: Path, pg_url: str) -> None:
    """Across machines, lease expiry decides: a SIGKILLed worker's run is completed by another worker's
    recover(); a live worker's run (renewing its lease) is never taken."""
    mark = tmp_path / "mark.txt"
    path = module(tmp_path, "slow_flow", SLOW.format(url=pg_url, mark=str(mark)))
    lease = {"DURABLE_NB_LEASE_SECONDS": "1"}
    doomed = start(path, "run", "doomed", DURABLE_NB_HOST="host-a", **lease)
    live = start(path, "run", "live", DURABLE_NB_HOST="host-c", SLOW_SECONDS="6", **lease)
    wait_for(lambda: mark.exists() and len(mark.read_text().splitlines()) == 2)
    os.kill(doomed.pid, signal.SIGKILL)
    doomed.wait()
    recoverer = start(path, "recover", "4", DURABLE_NB_HOST="host-b", SLOW_SECONDS="0", **lease)
    out, err = recoverer.communicate(timeout=120)
    assert recoverer.returncode == 0, err
    runs = dnb.runs(store=pg_url)
    assert len(runs) == 2
    live_out, _ = live.communicate(timeout=120)
    assert live_out.strip() == "completed"
    states = {dnb.get_run(r, store=pg_url).state["who"]: r for r in runs["run_id"]}
    assert out.split() == [states["doomed"]]  # only the dead worker's run was taken
    assert dnb.get_run(states["doomed"], store=pg_url).status == "completed"
    assert dnb.get_run(states["live"], store=pg_url).status == "completed"
    bodies = mark.read_text().split()
    assert bodies.count("live") == 1 and bodies.count("doomed") == 2


@pytest.mark.parametrize("where", ["mid-transaction", "after-landing"])
def test_lost_connection_mid_commit_retries_without_half_writes(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """The server drops the connection in the middle of a commit (a commit sent as a pipeline of
    statements), or once a commit sent as one statement landed, before its answer: nothing is
    half-written or written twice, and the commit retries."""
    from durable_nb.store import postgres_ops

    dropped: list[str] = []

    def drop_once(original):
        def dropping(conn, run, commit, *args):  # inject the failure: kill our own backend
            written = original(conn, run, commit, *args)
            if not dropped and any(d.step == "after:middle" for d in commit.checkpoints):
                dropped.append("yes")
                conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
            return written

        return dropping

    if where == "mid-transaction":
        monkeypatch.setattr(postgres_ops, "_fits_one_statement", lambda commit: False)
        monkeypatch.setattr(postgres_ops, "_write_children", drop_once(postgres_ops._write_children))
    else:
        monkeypatch.setattr(postgres_ops, "_write_one_statement", drop_once(postgres_ops._write_one_statement))
    flow = dnb.Workflow("flaky-network", store=pg_url)

    @flow.node()
    def first(state):
        return {"a": 1}

    @flow.node(after="first")
    def middle(state):
        return {"b": 2}

    @flow.node(after="middle")
    def last(state):
        return {"c": 3}

    run = flow.run({})
    assert dropped == ["yes"]
    assert run.status == "completed"
    steps = list(dnb.history(run.id, store=pg_url)["step"])
    assert steps == ["after:first", "after:middle", "after:last", "run_end"]
    assert dnb.get_run(run.id, store=pg_url).state == {"a": 1, "b": 2, "c": 3}


def test_terminated_backends_mid_run_then_resume(pg_url: str) -> None:
    """Every connection of the store is terminated while a node runs: the run completes or fails
    cleanly, and resumes; checkpoints stay consecutive."""
    import psycopg

    base = postgres_base()
    flow = dnb.Workflow("terminated", store=pg_url)
    store = dnb.connect(pg_url)

    @flow.node()
    def first(state):
        return {"a": 1}

    @flow.node(after="first", retry_count=0)
    def cut(state):
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                (store.application_name,),
            )
        return {"b": 2}

    @flow.node(after="cut")
    def last(state):
        return {"c": 3}

    run = flow.run({})
    if run.status != "completed":
        run = flow.resume(run.id)
    assert run.status == "completed"
    seqs = [
        row[0] for row in execute_sql(pg_url, "SELECT seq FROM checkpoints WHERE run_id = ? ORDER BY seq", (run.id,))
    ]
    assert seqs == list(range(1, len(seqs) + 1))
    steps = list(dnb.history(run.id, store=pg_url)["step"])
    assert steps.count("after:cut") == 1 and steps[-1] == "run_end"


def test_sync_api_waits_on_a_worker_when_every_connection_is_busy(pg_url: str) -> None:
    """Under the sync API a store call runs on the caller's thread when a pooled connection
    is free at once; when the pool is exhausted, it waits for one on a worker thread instead of
    failing or blocking for good."""
    import threading

    from durable_nb._loop import run_sync
    from durable_nb.store.postgres import PostgresStore

    store = PostgresStore(f"{pg_url}&pool_max=1")
    try:
        flow = dnb.Workflow("busy-pool", store=store)

        @flow.node()
        def only(state):
            return {"done": True}

        run = flow.run({})
        pool = store._pool_or_open()
        held = pool.getconn()  # the pool's only connection
        released: list[float] = []

        def release() -> None:
            released.append(time.monotonic())
            pool.putconn(held)

        threading.Timer(0.4, release).start()
        fetched = run_sync(store.get_run(run.id))
        assert released, "the call ran without a connection"
        assert fetched.status.value == "completed"
        assert flow.run({}).status == "completed"
    finally:
        run_sync(store.close())
