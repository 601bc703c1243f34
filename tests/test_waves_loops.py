"""Parallel waves, loops, switches and maps, and the status of their runs, with real kills for crashes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import Stated, env_with_repo, execute_sql, stated

import durable_nb as dnb
from durable_nb._loop import run_sync
from durable_nb.model import EventRecord

NODE_COUNT_KEYS = {"pending", "running", "ok", "failed", "skipped", "suspended", "cancelled"}


# -- helpers -----------------------------------------------------------------------------


class FakeSleep:
    """An async sleep that returns at once and records what the engine asked for."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def make_flow(name: str, store_url: str) -> dnb.Workflow:
    return dnb.Workflow(name, store=store_url, sleep=FakeSleep())


def checkpoints(store_url: str, run_id: str) -> list[Stated]:
    return stated(dnb.connect(store_url), run_id)


def events(store_url: str, run_id: str) -> list[EventRecord]:
    return run_sync(dnb.connect(store_url).list_events(run_id))


def steps(store_url: str, run_id: str) -> list[str]:
    return [c.step for c in checkpoints(store_url, run_id)]


def executions(status: dict[str, Any]) -> list[tuple[str, str | None, int | None, int | None, str]]:
    """Flatten a status's executions to (node_id, branch_key, iteration, item_index, status)."""
    out = []
    for execution in status["executions"]:
        address = execution["address"]
        out.append(
            (
                address["node_id"],
                address["branch_key"],
                address["iteration"],
                address["item_index"],
                execution["status"],
            )
        )
    return out


def counts(**expected: int) -> dict[str, int]:
    """Return the full node_counts mapping expected: the given numbers, zero elsewhere."""
    return {key: expected.get(key, 0) for key in NODE_COUNT_KEYS}


def check_status_shape(status: dict[str, Any], run_id: str) -> None:
    """A status has exactly the documented keys at every level."""
    assert set(status) == {"run_id", "status", "node_counts", "executions"}
    assert status["run_id"] == run_id
    assert set(status["node_counts"]) == NODE_COUNT_KEYS
    assert all(isinstance(v, int) for v in status["node_counts"].values())
    for execution in status["executions"]:
        assert set(execution) == {"address", "status"}
        assert set(execution["address"]) == {"node_id", "branch_key", "iteration", "item_index"}
        assert execution["status"] in NODE_COUNT_KEYS
    assert sum(status["node_counts"].values()) == len(status["executions"])


# -- parallel waves ------------------------------------------------------------------------


def test_wave_nodes_run_concurrently_each_committed_on_its_own(store_url: str) -> None:
    """Nodes whose dependencies are met run together (two sync nodes meet at a barrier, two
    async nodes wait for each other's event); each node is committed on its own after:<node>
    checkpoint whose state holds its own updates, and the wave's nodes start before any finishes."""
    flow = make_flow("waves", store_url)
    barrier = threading.Barrier(2, timeout=5)
    ping_ready, pong_ready = asyncio.Event(), asyncio.Event()

    @flow.node(retry_count=0)
    def left(state):
        barrier.wait()  # BrokenBarrierError after 5 s unless ``right`` runs at the same time
        return {"left": 1}

    @flow.node(retry_count=0)
    def right(state):
        barrier.wait()
        return {"right": 2}

    @flow.node(after=("left", "right"), retry_count=0)
    async def ping(state):
        ping_ready.set()
        await asyncio.wait_for(pong_ready.wait(), 5)
        return {"ping": state["left"] + state["right"]}

    @flow.node(after=("left", "right"), retry_count=0)
    async def pong(state):
        pong_ready.set()
        await asyncio.wait_for(ping_ready.wait(), 5)
        return {"pong": state["left"] * state["right"]}

    run = flow.run({"seed": 0})
    assert run.status == "completed", run.error
    assert run.state == {"seed": 0, "left": 1, "right": 2, "ping": 3, "pong": 2}

    cps = checkpoints(store_url, run.id)
    assert [c.step for c in cps][-1] == "run_end"
    nodes = [c.step for c in cps if c.step.startswith("after:")]
    assert len(nodes) == 4  # one checkpoint per node, none shared
    assert set(nodes[:2]) == {"after:left", "after:right"}
    assert set(nodes[2:]) == {"after:ping", "after:pong"}
    keys = {"left": "left", "right": "right", "ping": "ping", "pong": "pong"}
    for wave in (nodes[:2], nodes[2:]):
        first, second = (next(c for c in cps if c.step == s) for s in wave)
        # The first commit of the wave holds its own update, not its sibling's (not yet finished).
        assert keys[first.node_id] in first.manifest
        assert keys[second.node_id] not in first.manifest
        assert {keys[first.node_id], keys[second.node_id]} <= set(first.manifest) | set(second.manifest)
        assert keys[second.node_id] in second.manifest
        assert first.node_id in second.completed and second.node_id not in first.completed

    log = [(e.type, e.node_id) for e in events(store_url, run.id)]
    for pair in (("left", "right"), ("ping", "pong")):
        starts = [log.index(("node_started", n)) for n in pair]
        finishes = [log.index(("node_finished", n)) for n in pair]
        assert max(starts) < min(finishes), log
    assert [t for t, _ in log].count("node_finished") == 4


def test_wave_write_clash_declared_is_refused_before_anything_runs(store_url: str) -> None:
    """Two nodes of one wave declaring one key in writes= is a ConfigurationError from run(),
    raised before any node runs and before a run row exists; an ordered pair may share a key."""
    ran: list[str] = []
    flow = make_flow("declared-clash", store_url)

    @flow.node(retry_count=0)
    def start(state):
        ran.append("start")
        return {"x": 1}

    @flow.node(after="start", retry_count=0, writes=("total", "a_only"))
    def a(state):
        ran.append("a")
        return {"total": 1, "a_only": 1}

    @flow.node(after="start", retry_count=0, writes=("total",))
    def b(state):
        ran.append("b")
        return {"total": 2}

    with pytest.raises(dnb.ConfigurationError) as caught:
        flow.run({})
    message = str(caught.value)
    assert "'a'" in message and "'b'" in message and "total" in message
    assert "a_only" not in message
    assert ran == []
    assert run_sync(dnb.connect(store_url).list_runs()) == []

    ordered = make_flow("declared-ordered", store_url)

    @ordered.node(retry_count=0, writes=("total",))
    def first(state):
        return {"total": 1}

    @ordered.node(after="first", retry_count=0, writes=("total",))
    def second(state):
        return {"total": state["total"] + 1}

    done = ordered.run({})
    assert done.status == "completed"
    assert done.state == {"total": 2}


def clash_flow(store_url: str, ran: Counter[str]) -> dnb.Workflow:
    """Two nodes of one wave that both return ``k`` without declaring it; ``a`` always finishes first."""
    flow = make_flow("undeclared-clash", store_url)
    a_done = threading.Event()

    @flow.node(retry_count=0)
    def a(state):
        ran["a"] += 1
        a_done.set()
        return {"k": "from-a"}

    @flow.node(retry_count=0)
    def b(state):
        ran["b"] += 1
        a_done.wait(5)
        time.sleep(0.05)  # let a's result be committed first
        return {"k": "from-b", "b_extra": 1}

    @flow.node(after=("a", "b"), retry_count=0)
    def tail(state):
        ran["tail"] += 1
        return {"tail": state["k"]}

    return flow


def test_wave_write_clash_undeclared_fails_the_run_keeping_the_first(store_url: str) -> None:
    """Two wave nodes returning one key (undeclared) fail the run with a message naming both
    nodes and the key; the first committed node's result is kept, the second's is not committed."""
    ran: Counter[str] = Counter()
    flow = clash_flow(store_url, ran)
    run = flow.run({})
    assert run.status == "failed"
    assert run.error is not None
    assert "'a'" in run.error and "'b'" in run.error and "'k'" in run.error
    assert run.error.startswith("Node 'b' failed")
    assert run.state == {"k": "from-a"}
    assert ran == Counter(a=1, b=1)

    cps = checkpoints(store_url, run.id)
    assert [c.step for c in cps] == ["after:a", "failed:b", "run_end"]
    assert cps[1].queue[0] == "b"
    assert "b_extra" not in cps[1].manifest
    assert dnb.get_run(run.id, store=store_url).state == {"k": "from-a"}


def test_wave_write_clash_message_has_one_prefix(store_url: str) -> None:
    """The clash error reads ``Node 'b' failed: <reason>`` once, not twice."""
    run = clash_flow(store_url, Counter()).run({})
    assert run.status == "failed"
    assert run.error is not None
    assert run.error.count("Node 'b' failed") == 1, run.error


def test_wave_write_clash_is_not_lost_on_resume(store_url: str) -> None:
    """Resuming a run that failed on a wave clash, with the same code, must not silently
    replace the kept result of the first node (the outcome would then depend on a failure)."""
    ran: Counter[str] = Counter()
    flow = clash_flow(store_url, ran)
    run = flow.run({})
    assert run.status == "failed"
    resumed = flow.resume(run.id)
    assert resumed.status == "failed", resumed.state
    assert resumed.state["k"] == "from-a"


def test_wave_failure_keeps_siblings_and_resume_reruns_only_the_failed_node(store_url: str) -> None:
    """In a wave where one node fails (retry_count=0), the other node's committed result
    is kept; after a fix, resume re-runs only the failed node, then the nodes after the wave."""
    ran: Counter[str] = Counter()
    broken = [True]
    flow = make_flow("wave-failure", store_url)

    @flow.node(retry_count=0)
    def good(state):
        ran["good"] += 1
        time.sleep(0.05)
        return {"g": 10}

    @flow.node(retry_count=0, label="Bad node")
    def bad(state):
        ran["bad"] += 1
        if broken[0]:
            raise ValueError("bad input")
        return {"b": 5}

    @flow.node(after=("good", "bad"), retry_count=0)
    def combine(state):
        ran["combine"] += 1
        return {"sum": state["g"] + state["b"]}

    run = flow.run({})
    assert run.status == "failed"
    assert run.error == "Node 'Bad node' failed: ValueError: bad input"
    assert run.state == {"g": 10}
    cps = checkpoints(store_url, run.id)
    assert [c.step for c in cps] == ["after:good", "failed:bad", "run_end"]
    assert cps[1].completed == ["good"]
    assert cps[1].queue == ["bad"]
    assert ran == Counter(good=1, bad=1)

    broken[0] = False
    done = flow.resume(run.id)
    assert done.status == "completed", done.error
    assert done.state == {"g": 10, "b": 5, "sum": 15}
    assert ran == Counter(good=1, bad=2, combine=1)
    assert steps(store_url, run.id)[3:] == ["after:bad", "after:combine", "run_end"]


# -- loops ---------------------------------------------------------------------------------


def loop_flow(store_url: str, ran: Counter[str], seen: list[tuple[int, int]], cap: int) -> dnb.Workflow:
    flow = make_flow("loops", store_url)

    @flow.node(retry_count=0)
    def init(state):
        ran["init"] += 1
        return {"x": 0}

    def more(state):
        seen.append((state["x"], state["__loop_step"]))
        return state["x"] < state["limit"]

    @flow.loop(after="init", condition=more, max_iterations=cap, retry_count=0)
    def step(state):
        ran["step"] += 1
        return {"x": state["x"] + 1}

    @flow.node(after="step", retry_count=0)
    def done(state):
        ran["done"] += 1
        return {"final": state["x"], "counter": state["__loop_step"]}

    return flow


@pytest.mark.parametrize(
    ("limit", "expected"),
    [(100, 4), (2, 2), (1, 1)],
    ids=["cap-wins", "condition-ends-early", "condition-false-at-once"],
)
def test_loop_runs_until_condition_or_cap(store_url: str, limit: int, expected: int) -> None:
    """The body re-runs while condition(state after the iteration) holds, max_iterations ends it
    whatever the condition; __loop_<node> counts iterations in state; each iteration is committed
    as after:<node> with its iteration number; the downstream node runs once, after the loop."""
    ran: Counter[str] = Counter()
    seen: list[tuple[int, int]] = []
    flow = loop_flow(store_url, ran, seen, cap=4)
    run = flow.run({"limit": limit})
    assert run.status == "completed", run.error
    assert ran == Counter(init=1, step=expected, done=1)
    assert run.state == {"limit": limit, "x": expected, "__loop_step": expected, "final": expected, "counter": expected}
    # The condition sees each iteration's updates and counter; at the cap it is not even asked.
    asked = expected if expected < 4 else 3
    assert seen == [(i, i) for i in range(1, asked + 1)]

    cps = checkpoints(store_url, run.id)
    loop_cps = [c for c in cps if c.step == "after:step"]
    assert [c.iteration for c in loop_cps] == list(range(1, expected + 1))
    assert [c.step for c in cps] == ["after:init"] + ["after:step"] * expected + ["after:done", "run_end"]
    # Only the last iteration completes the loop node; the others queue it again.
    assert all("step" not in c.completed and c.queue == ["step"] for c in loop_cps[:-1])
    assert "step" in loop_cps[-1].completed and loop_cps[-1].queue == ["done"]
    assert all(c.iteration is None for c in cps if c.step != "after:step")

    status = flow.status(run.id)
    check_status_shape(status, run.id)
    loop_addresses = sorted(e[2] for e in executions(status) if e[0] == "step")
    assert loop_addresses == list(range(1, expected + 1))
    assert status["node_counts"] == counts(ok=expected + 2)
    finished = [e.node_id for e in events(store_url, run.id) if e.type == "node_finished"]
    assert finished == ["init"] + ["step"] * expected + ["done"]


def test_loop_counter_survives_a_failed_iteration(store_url: str) -> None:
    """An iteration that fails leaves the committed counter; resume continues with the
    failed iteration, never repeats committed ones, and still stops at max_iterations."""
    bodies: list[int] = []
    broken = [True]
    flow = make_flow("loop-fail", store_url)

    @flow.loop(condition=lambda state: True, max_iterations=5, retry_count=0)
    def spin(state):
        iteration = state.get("__loop_spin", 0) + 1
        bodies.append(iteration)
        if iteration == 3 and broken[0]:
            raise RuntimeError("iteration 3 broke")
        return {"last": iteration}

    run = flow.run({})
    assert run.status == "failed"
    assert bodies == [1, 2, 3]
    assert run.state == {"last": 2, "__loop_spin": 2}
    status = flow.status(run.id)
    assert status["node_counts"] == counts(ok=2, failed=1)

    broken[0] = False
    done = flow.resume(run.id)
    assert done.status == "completed", done.error
    assert bodies == [1, 2, 3, 3, 4, 5]
    assert done.state == {"last": 5, "__loop_spin": 5}
    iterations = [c.iteration for c in checkpoints(store_url, run.id) if c.step == "after:spin"]
    assert iterations == [1, 2, 3, 4, 5]
    status = flow.status(run.id)
    assert status["node_counts"] == counts(ok=5)


# -- crash cases in child processes (imitating tests/crashkit.py) -----------------------------

CRASH_MODULE = """
import os, sys, time
import durable_nb as dnb

STORE = {store!r}
SIDE = {side!r}
LOOP_CAP = {loop_cap}
ITEMS = {items}


def append(line):
    fd = os.open(SIDE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\\n").encode())
    finally:
        os.close(fd)


looping = dnb.Workflow("crash-loop", store=STORE)


@looping.loop(condition=lambda state: True, max_iterations=LOOP_CAP, retry_count=0)
def spin(state):
    append("spin:%d" % (state.get("__loop_spin", 0) + 1))
    time.sleep(0.15)
    return {{"spins": state.get("spins", 0) + 1}}


@looping.node(after="spin", retry_count=0)
def after_loop(state):
    append("after_loop:0")
    return {{"seen": state["__loop_spin"]}}


mapping = dnb.Workflow("crash-map", store=STORE)


@mapping.map(items=lambda state: range(ITEMS), into="out", max_concurrency=2, retry_count=0)
def work(state, item):
    append("work:%d" % item)
    time.sleep(0.12)
    return item * 10


@mapping.node(after="work", retry_count=0)
def total(state):
    append("total:0")
    return {{"total": sum(state["out"])}}


if __name__ == "__main__":
    flows = {{"loop": looping, "map": mapping}}
    if sys.argv[1] == "run":
        print(flows[sys.argv[2]].run({{}}).status, flush=True)
    else:
        print(dnb.recover([looping, mapping]), flush=True)
"""

LOOP_CAP = 6
ITEMS = 10


class Crash:
    """A module with a loop flow and a map flow, run and SIGKILLed in child processes."""

    def __init__(self, folder: Path, store_url: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.url = store_url
        self.side = folder / "side-effects.txt"
        self.module = folder / "crash_waves.py"
        self.module.write_text(
            CRASH_MODULE.format(store=store_url, side=str(self.side), loop_cap=LOOP_CAP, items=ITEMS)
        )

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(self.module), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env_with_repo(),
        )

    def lines(self) -> list[str]:
        return self.side.read_text().split() if self.side.exists() else []

    def kill_after_lines(self, child: subprocess.Popen[str], count: int, delay: float, timeout: float = 20) -> None:
        """SIGKILL the child ``delay`` seconds after the side-effect file reaches ``count`` lines."""
        deadline = time.monotonic() + timeout
        try:
            while len(self.lines()) < count:
                assert child.poll() is None, f"the child ended before the kill: {child.communicate()}"
                assert time.monotonic() < deadline, "the child made no progress"
                time.sleep(0.002)
            time.sleep(delay)
            assert child.poll() is None, "the child finished before it could be killed"
        finally:
            if child.poll() is None:
                os.kill(child.pid, signal.SIGKILL)
            child.communicate()

    def finish(self, child: subprocess.Popen[str], timeout: float = 30) -> str:
        out, err = child.communicate(timeout=timeout)
        assert child.returncode == 0, err
        return out.strip()

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        return execute_sql(self.url, sql)

    def run_id(self) -> str:
        rows = self.query("SELECT run_id FROM runs")
        assert len(rows) == 1, rows
        return rows[0][0]


def test_loop_beside_a_gate_goes_on_after_approval(store_url: str) -> None:
    """A loop in one wave with a gate node: the gate pauses the wave after the loop's
    first iteration; after approval the loop's next iteration writes its own keys again, which
    is no clash with another node of the wave. (Found by the state-replay property test.)"""
    flow = make_flow("loop-gate", store_url)

    @flow.loop(condition=lambda state: True, max_iterations=3, retry_count=0)
    def spin(state):
        return {"x": state.get("x", 0) + 1}

    @flow.node(retry_count=0)
    def ask(state):
        dnb.gate("ok?")
        return {"asked": True}

    run = flow.run({})
    assert run.status == "paused"
    assert run.state == {"x": 1, "__loop_spin": 1}
    done = flow.approve(run.id)
    assert done.status == "completed", done.error
    assert done.state == {"x": 3, "__loop_spin": 3, "asked": True}


def test_loop_counter_survives_a_kill_mid_loop(tmp_path: Path, store_url: str) -> None:
    """A child runs a loop whose iterations append to a file and sleep; it is SIGKILLed
    mid-loop; recover() in a new process finishes it: every iteration number is committed exactly
    once, bodies ran max_iterations times plus at most the one in flight, the counter is right."""
    crash = Crash(tmp_path / "loop", store_url)
    child = crash.start("run", "loop")
    crash.kill_after_lines(child, 3, delay=0.05)  # in the middle of iteration 3's sleep
    at_kill = crash.lines()
    committed = [row[0] for row in crash.query("SELECT iteration FROM checkpoints WHERE step = 'after:spin'")]
    run_id = crash.run_id()
    assert crash.query("SELECT status FROM runs") == [("running",)]
    assert committed == list(range(1, len(committed) + 1))
    assert 1 <= len(committed) < LOOP_CAP
    in_flight = len(at_kill) - len(committed)
    assert in_flight in (0, 1), (at_kill, committed)

    report = crash.finish(crash.start("recover"))
    assert f"resumed=[{run_id!r}]" in report, report

    bodies = crash.lines()
    spins = [int(line.split(":")[1]) for line in bodies if line.startswith("spin:")]
    assert len(spins) == LOOP_CAP + in_flight, bodies
    assert sorted(set(spins)) == list(range(1, LOOP_CAP + 1))
    repeated = [i for i, n in Counter(spins).items() if n > 1]
    assert repeated == ([len(committed) + 1] if in_flight else []), spins
    assert bodies.count("after_loop:0") == 1 and bodies[-1] == "after_loop:0"

    iterations = [row[0] for row in crash.query("SELECT iteration FROM checkpoints WHERE step = 'after:spin'")]
    assert iterations == list(range(1, LOOP_CAP + 1))
    final = dnb.get_run(run_id, store=store_url)
    assert final.status == "completed"
    assert final.state == {"spins": LOOP_CAP, "__loop_spin": LOOP_CAP, "seen": LOOP_CAP}


def test_map_kill_mid_map_reruns_only_unfinished_items(tmp_path: Path, store_url: str) -> None:
    """A child runs a map (2 items at a time) and is SIGKILLed mid-map; recover() in a new
    process runs only the items with no commit: committed items' bodies ran once, items in flight
    at the kill twice, the rest once; results are complete and in item order."""
    crash = Crash(tmp_path / "map", store_url)
    child = crash.start("run", "map")
    crash.kill_after_lines(child, 5, delay=0.03)
    at_kill = Counter(crash.lines())
    committed = {row[0] for row in crash.query("SELECT item_index FROM checkpoints WHERE step = 'after:work'")}
    run_id = crash.run_id()
    started = {int(line.split(":")[1]) for line in at_kill}
    assert committed < started, (committed, started)  # some items were in flight
    assert len(committed) < ITEMS

    report = crash.finish(crash.start("recover"))
    assert f"resumed=[{run_id!r}]" in report, report

    bodies = Counter(crash.lines())
    for item in range(ITEMS):
        expected = 2 if item in started - committed else 1
        assert bodies[f"work:{item}"] == expected, (item, committed, started, bodies)
    assert bodies["total:0"] == 1

    rows = crash.query("SELECT item_index FROM checkpoints WHERE step = 'after:work'")
    assert sorted(row[0] for row in rows) == list(range(ITEMS))  # each item committed exactly once
    final = dnb.get_run(run_id, store=store_url)
    assert final.status == "completed"
    assert final.state == {"out": [i * 10 for i in range(ITEMS)], "total": sum(i * 10 for i in range(ITEMS))}


# -- switches ------------------------------------------------------------------------------


def switch_flow(store_url: str, ran: Counter[str], broken: list[str] | None = None) -> dnb.Workflow:
    """start -> route -> (a | b -> b2) -> join(a, b2)."""
    flow = make_flow("switches", store_url)
    broken = broken if broken is not None else []

    def body(name: str, updates: dict[str, Any]):
        def fn(state):
            ran[name] += 1
            if name in broken:
                raise RuntimeError(f"{name} broke")
            return updates

        fn.__name__ = name
        return fn

    flow.node(body("start", {"started": True}), retry_count=0)

    @flow.switch(after="start")
    def route(state):
        ran["route"] += 1
        return state["pick"]

    flow.node(body("a", {"path": "a"}), after="route", retry_count=0)
    flow.node(body("b", {"path": "b"}), after="route", retry_count=0)
    flow.node(body("b2", {"b2": True}), after="b", retry_count=0)

    @flow.node(after=("a", "b2"), retry_count=0)
    def join(state):
        ran["join"] += 1
        return {"joined": state["path"]}

    return flow


def test_switch_takes_one_branch_and_skips_the_other(store_url: str) -> None:
    """The switch's choice runs; the untaken branch and the nodes depending only on it are
    skipped (never run, `skipped` in status); the switch writes no checkpoint; the join runs."""
    ran: Counter[str] = Counter()
    flow = switch_flow(store_url, ran)
    run = flow.run({"pick": "a"})
    assert run.status == "completed", run.error
    assert ran == Counter(start=1, route=1, a=1, join=1)
    assert run.state == {"pick": "a", "started": True, "path": "a", "joined": "a"}

    cps = checkpoints(store_url, run.id)
    assert [c.step for c in cps] == ["after:start", "after:a", "after:join", "run_end"]
    assert all(c.node_id != "route" and "route" not in c.step for c in cps)
    assert next(c for c in cps if c.step == "after:a").branch_key == "a"
    assert sorted(cps[-1].skipped) == ["b", "b2"]

    status = flow.status(run.id)
    check_status_shape(status, run.id)
    by_node = {e[0]: e for e in executions(status)}
    assert by_node["b"][4] == "skipped" and by_node["b2"][4] == "skipped"
    assert by_node["a"] == ("a", "a", None, None, "ok")
    assert by_node["route"][4] == "ok" and by_node["join"][4] == "ok"
    assert status["node_counts"] == counts(ok=4, skipped=2)
    finished = [(e.node_id, e.data.get("route")) for e in events(store_url, run.id) if e.type == "node_finished"]
    assert ("route", "a") in finished

    other = flow.run({"pick": "b"})
    assert other.status == "completed"
    assert other.state["joined"] == "b" and other.state["b2"] is True
    assert ran == Counter(start=2, route=2, a=1, b=1, b2=1, join=2)
    assert sorted(checkpoints(store_url, other.id)[-1].skipped) == ["a"]


def test_switch_with_branches_mapping(store_url: str) -> None:
    """With branches= the router returns a key; a key may name several nodes; the key is each
    taken node's branch_key; a key outside the mapping fails the run naming the key and the keys."""
    ran: Counter[str] = Counter()
    flow = make_flow("mapped-switch", store_url)

    @flow.switch(branches={"small": "fast", "big": ["slow", "audit"]})
    def route(state):
        return state["size"]

    @flow.node(after="route", retry_count=0)
    def fast(state):
        ran["fast"] += 1
        return {"path": "fast"}

    @flow.node(after="route", retry_count=0)
    def slow(state):
        ran["slow"] += 1
        return {"path": "slow"}

    @flow.node(after="route", retry_count=0)
    def audit(state):
        ran["audit"] += 1
        return {"audited": True}

    @flow.node(after=("fast", "slow"), retry_count=0)
    def join(state):
        ran["join"] += 1
        return {"joined": state["path"]}

    big = flow.run({"size": "big"})
    assert big.status == "completed", big.error
    assert big.state == {"size": "big", "path": "slow", "audited": True, "joined": "slow"}
    assert ran == Counter(slow=1, audit=1, join=1)
    cps = checkpoints(store_url, big.id)
    assert {c.step: c.branch_key for c in cps if c.step in ("after:slow", "after:audit")} == {
        "after:slow": "big",
        "after:audit": "big",
    }
    assert sorted(cps[-1].skipped) == ["fast"]

    small = flow.run({"size": "small"})
    assert small.status == "completed"
    assert small.state["joined"] == "fast"
    assert sorted(checkpoints(store_url, small.id)[-1].skipped) == ["audit", "slow"]
    by_node = {e[0]: e for e in executions(flow.status(small.id))}
    assert by_node["fast"][1] == "small"

    wrong = flow.run({"size": "huge"})
    assert wrong.status == "failed"
    assert wrong.error is not None
    assert wrong.error.startswith("Node 'route' failed")
    assert "'huge'" in wrong.error and "big" in wrong.error and "small" in wrong.error
    assert ran == Counter(slow=1, audit=1, join=2, fast=1)


@pytest.mark.parametrize("pick", ["start", "nowhere"])
def test_switch_choosing_a_non_dependent_fails_the_run(store_url: str, pick: str) -> None:
    """A switch choosing a node that does not run after it fails the run with a clear message
    naming the choice and the nodes that can be chosen; no branch runs."""
    ran: Counter[str] = Counter()
    flow = switch_flow(store_url, ran)
    run = flow.run({"pick": pick})
    assert run.status == "failed"
    assert run.error is not None
    assert run.error.startswith("Node 'route' failed")
    assert repr(pick) in run.error and "'a'" in run.error and "'b'" in run.error
    assert ran == Counter(start=1, route=1)
    assert [c.step for c in checkpoints(store_url, run.id)] == ["after:start", "failed:route", "run_end"]


def test_switch_returning_none_skips_every_branch(store_url: str) -> None:
    """A switch returning None takes no branch: every dependent, and the join after them, is
    skipped (none runs) and the run completes."""
    ran: Counter[str] = Counter()
    flow = switch_flow(store_url, ran)
    run = flow.run({"pick": None})
    assert run.status == "completed", run.error
    assert ran == Counter(start=1, route=1)
    assert run.state == {"pick": None, "started": True}
    cps = checkpoints(store_url, run.id)
    assert [c.step for c in cps] == ["after:start", "run_end"]
    assert sorted(cps[-1].skipped) == ["a", "b", "b2", "join"]
    assert "route" in cps[-1].completed


def test_status_after_switch_returning_none(store_url: str) -> None:
    """A completed run whose switch took no branch reports the switch ok and every other
    branch node skipped, with and without the workflow's code."""
    flow = switch_flow(store_url, Counter())
    run = flow.run({"pick": None})
    assert run.status == "completed"
    status = flow.status(run.id)
    assert status["node_counts"] == counts(ok=2, skipped=4)
    plain = dnb.status(run.id, store=store_url)
    assert plain["node_counts"] == counts(ok=2, skipped=4)


def test_switch_branch_failure_resumes_on_the_same_branch(store_url: str) -> None:
    """A taken branch that fails keeps the route; resume runs only that branch node and the
    join, never the switch or the untaken branch again."""
    ran: Counter[str] = Counter()
    broken = ["a"]
    flow = switch_flow(store_url, ran, broken)
    run = flow.run({"pick": "a"})
    assert run.status == "failed"
    assert ran == Counter(start=1, route=1, a=1)
    broken.clear()
    done = flow.resume(run.id)
    assert done.status == "completed", done.error
    assert ran == Counter(start=1, route=1, a=2, join=1)
    status = flow.status(run.id)
    assert status["node_counts"] == counts(ok=4, skipped=2)


# -- maps ----------------------------------------------------------------------------------


def test_map_runs_once_per_item_with_item_index(store_url: str) -> None:
    """A map runs its function once per item, commits each item on its own with item_index in
    the checkpoint and in the status address; results land in state[into] in item order even when
    items finish out of order; the node after the map runs once."""
    ran: Counter[int] = Counter()
    flow = make_flow("maps", store_url)

    @flow.node(retry_count=0)
    def source(state):
        return {"words": ["a", "bb", "ccc", "dddd", "eeeee"]}

    @flow.map(after="source", items="words", into="lengths", retry_count=0)
    def measure(state, item):
        ran[len(item)] += 1
        time.sleep(0.025 * (6 - len(item)))  # later items finish first
        return len(item)

    @flow.node(after="measure", retry_count=0)
    def summary(state):
        return {"total": sum(state["lengths"])}

    run = flow.run({})
    assert run.status == "completed", run.error
    assert run.state == {"words": ["a", "bb", "ccc", "dddd", "eeeee"], "lengths": [1, 2, 3, 4, 5], "total": 15}
    assert ran == Counter({1: 1, 2: 1, 3: 1, 4: 1, 5: 1})

    cps = checkpoints(store_url, run.id)
    item_cps = [c for c in cps if c.step == "after:measure"]
    assert sorted(c.item_index for c in item_cps) == [0, 1, 2, 3, 4]
    assert [c.item_index for c in item_cps] != [0, 1, 2, 3, 4]  # committed as they finished
    assert "measure" in item_cps[-1].completed
    assert all("measure" not in c.completed for c in item_cps[:-1])
    assert not any(k.startswith("__map_") for k in cps[-1].manifest)

    status = flow.status(run.id)
    check_status_shape(status, run.id)
    indexes = sorted(e[3] for e in executions(status) if e[0] == "measure")
    assert indexes == [0, 1, 2, 3, 4]
    assert status["node_counts"] == counts(ok=7)
    plain = dnb.status(run.id, store=store_url)
    assert sorted(e[3] for e in executions(plain) if e[0] == "measure") == [0, 1, 2, 3, 4]


def test_map_empty_items_and_default_into(store_url: str) -> None:
    """An empty items list gives [] (under the node's name when into= is not given) and the
    run continues."""
    calls: list[Any] = []
    flow = make_flow("empty-map", store_url)

    @flow.map(items=lambda state: state["xs"], retry_count=0)
    def echo(state, item):
        calls.append(item)
        return item

    @flow.node(after="echo", retry_count=0)
    def after(state):
        return {"n": len(state["echo"])}

    run = flow.run({"xs": []})
    assert run.status == "completed", run.error
    assert run.state == {"xs": [], "echo": [], "n": 0}
    assert calls == []
    assert steps(store_url, run.id) == ["after:echo", "after:after", "run_end"]


def test_map_items_see_the_state_the_map_found(store_url: str) -> None:
    """Every item sees the run's state as the map found it (after a resume too), never the
    results other items keep under internal keys until the map commits."""
    seen: list[set[str]] = []
    broken = [True]
    flow = make_flow("map-view", store_url)

    @flow.map(items="xs", into="ys", max_concurrency=1, retry_count=0)
    def square(state, item):
        seen.append(set(state))
        if item == 3 and broken[0]:
            raise RuntimeError("item 3 broke")
        return item * item

    run = flow.run({"xs": [1, 2, 3, 4], "tag": "t"})
    assert run.status == "failed"
    broken[0] = False
    run = flow.resume(run.id)
    assert run.status == "completed", run.error
    assert run.state == {"xs": [1, 2, 3, 4], "tag": "t", "ys": [1, 4, 9, 16]}
    assert seen == [{"xs", "tag"}] * 5


def test_map_respects_max_concurrency(store_url: str) -> None:
    """At most max_concurrency items of an (async) map run at once."""
    live = [0]
    peak = [0]
    flow = make_flow("bounded-map", store_url)

    @flow.map(items=lambda state: range(8), into="squares", max_concurrency=3, retry_count=0)
    async def square(state, item):
        live[0] += 1
        peak[0] = max(peak[0], live[0])
        await asyncio.sleep(0.02)
        live[0] -= 1
        return item * item

    run = flow.run({})
    assert run.status == "completed"
    assert run.state == {"squares": [i * i for i in range(8)]}
    assert 2 <= peak[0] <= 3


def test_map_failing_item_keeps_committed_items_and_resume_runs_only_the_rest(store_url: str) -> None:
    """A failing item (retry_count=0) fails the run; the other items' results stay
    committed; after a fix, resume runs only the failed item, then the node after the map."""
    ran: Counter[int] = Counter()
    broken = {20}
    flow = make_flow("map-failure", store_url)

    @flow.map(items="items", into="out", retry_count=0, label="Double")
    def double(state, item):
        ran[item] += 1
        if item in broken:
            raise ValueError(f"cannot double {item}")
        return item * 2

    @flow.node(after="double", retry_count=0)
    def tail(state):
        ran[-1] += 1
        return {"n": len(state["out"])}

    run = flow.run({"items": [10, 20, 30, 40]})
    assert run.status == "failed"
    assert run.error == "Node 'Double' failed: ValueError: cannot double 20"
    assert ran == Counter({10: 1, 20: 1, 30: 1, 40: 1})
    cps = checkpoints(store_url, run.id)
    assert sorted(c.item_index for c in cps if c.step == "after:double") == [0, 2, 3]
    failed = next(c for c in cps if c.step == "failed:double")
    assert failed.item_index == 1 and failed.queue[0] == "double"

    status = flow.status(run.id)
    check_status_shape(status, run.id)
    items = sorted((e[3], e[4]) for e in executions(status) if e[0] == "double")
    assert items == [(0, "ok"), (1, "failed"), (2, "ok"), (3, "ok")]
    assert status["node_counts"] == counts(ok=3, failed=1, pending=1)

    broken.clear()
    done = flow.resume(run.id)
    assert done.status == "completed", done.error
    assert done.state == {"items": [10, 20, 30, 40], "out": [20, 40, 60, 80], "n": 4}
    assert ran == Counter({10: 1, 20: 2, 30: 1, 40: 1, -1: 1})
    after = [c for c in checkpoints(store_url, run.id) if c.step == "after:double"]
    assert sorted(c.item_index for c in after) == [0, 1, 2, 3]
    status = flow.status(run.id)
    assert status["node_counts"] == counts(ok=5)


# -- status --------------------------------------------------------------------------------


def test_status_of_paused_failed_and_completed_runs(store_url: str) -> None:
    """Status has the documented shape; node_counts for a paused run (the gated node
    suspended, nodes after it pending), a failed run, and a completed run with skipped nodes."""
    flow = make_flow("status-paused", store_url)

    @flow.node(retry_count=0)
    def one(state):
        return {"o": 1}

    @flow.node(after="one", retry_count=0)
    def ask(state):
        return {"ok": dnb.gate("ok?", context={"o": state["o"]}).approved}

    @flow.node(after="one", retry_count=0)
    def side(state):
        return {"side": 1}

    @flow.node(after=("ask", "side"), retry_count=0)
    def last(state):
        return {"last": 1}

    paused = flow.run({})
    assert paused.status == "paused"
    status = flow.status(paused.id)
    check_status_shape(status, paused.id)
    assert status["status"] == "paused"
    assert status["node_counts"] == counts(ok=2, suspended=1, pending=1)
    assert sorted((e[0], e[4]) for e in executions(status)) == [
        ("ask", "suspended"),
        ("last", "pending"),
        ("one", "ok"),
        ("side", "ok"),
    ]
    plain = dnb.status(paused.id, store=store_url)
    check_status_shape(plain, paused.id)
    assert plain["node_counts"]["suspended"] == 1 and plain["node_counts"]["ok"] == 2

    approved = flow.approve(paused.id)
    assert approved.status == "completed"
    status = flow.status(paused.id)
    assert status["status"] == "completed"
    assert status["node_counts"] == counts(ok=4)

    failing = make_flow("status-failed", store_url)

    @failing.node(retry_count=0)
    def fine(state):
        return {"f": 1}

    @failing.node(retry_count=0)
    def broken(state):
        raise RuntimeError("no")

    @failing.node(after=("fine", "broken"), retry_count=0)
    def later(state):
        return {"l": 1}

    failed = failing.run({})
    assert failed.status == "failed"
    status = failing.status(failed.id)
    check_status_shape(status, failed.id)
    assert status["status"] == "failed"
    assert status["node_counts"] == counts(ok=1, failed=1, pending=1)
    assert ("broken", None, None, None, "failed") in executions(status)

    ran: Counter[str] = Counter()
    switched = switch_flow(store_url, ran)
    done = switched.run({"pick": "b"})
    assert done.status == "completed"
    for status in (switched.status(done.id), dnb.status(done.id, store=store_url)):
        check_status_shape(status, done.id)
        assert status["status"] == "completed"
        assert status["node_counts"] == counts(ok=5, skipped=1)
        assert ("a", None, None, None, "skipped") in executions(status)
        assert ("b", "b", None, None, "ok") in executions(status)


def test_the_next_wave_follows_from_what_finished_as_a_full_scan_would() -> None:
    """The wave worked out from the nodes that just finished equals a scan of the whole graph,
    over random graphs and random orders of completing and skipping."""
    import random

    from durable_nb.engine.workflows.graph import Graph, NodeSpec

    rng = random.Random(7)
    for trial in range(200):
        graph = Graph(f"g{trial}")
        names = [f"n{i}" for i in range(rng.randint(1, 25))]
        for index, name in enumerate(names):
            after = tuple(rng.sample(names[:index], k=min(index, rng.randint(0, 3))))
            graph.add(NodeSpec(name, lambda state: None, after, 0, None, name))
        completed: dict[str, None] = {}
        skipped: set[str] = set()
        wave = graph.ready(completed, skipped)
        while wave:
            finished = rng.sample(wave, k=rng.randint(1, len(wave)))
            for node in finished:
                if rng.random() < 0.2:
                    skipped.add(node)
                else:
                    completed[node] = None
            done = set(completed) | skipped
            wave = graph.ready_after(wave, completed, done, finished)
            assert wave == graph.ready(completed, skipped), (trial, finished)
