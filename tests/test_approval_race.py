"""Separate processes racing to approve one paused run: the claim is atomic, exactly one wins.

Each trial starts a run that pauses at a gate, then starts 2 to 8 child *processes* (not
threads) that all import the same workflow module, open the store, wait at a shared start
signal and then approve the same run at the same instant. Exactly one child must win; every
other one must get ``AlreadyResumed``; the gated node's post-gate body and the node after
the gate must run exactly once (counted in a side-effect file the node bodies append to).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest
from conftest import env_with_repo

import durable_nb as dnb

pytestmark = pytest.mark.slow

TRIALS = 20  # per variant
START_DELAY = 0.15  # seconds between the start signal and the instant every child approves
READY_TIMEOUT = 60.0
CHILD_TIMEOUT = 60.0

# The workflow both the parent and every child import, so the code is identical.
# ``{store!r}`` and ``{side!r}`` are filled in per test.
FLOW_MODULE = '''\
"""Workflow shared by the racing processes (written by tests/test_approval_race.py)."""

import os

import durable_nb as dnb

STORE = {store!r}
SIDE = {side!r}

flow = dnb.Workflow("approval-race", store=STORE)


def mark(*fields):
    """Append one side-effect line; O_APPEND keeps lines of concurrent writers whole."""
    line = " ".join(str(f) for f in fields) + "\\n"
    fd = os.open(SIDE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@flow.node(retry_count=0)
def classify(state):
    mark("classify", os.getpid())
    return {{"category": "billing"}}


@flow.node(after="classify", retry_count=0)
def review(state):
    mark("review-enter", os.getpid())
    d = dnb.gate("approve_reply", context={{"ticket": state["ticket"]}})
    mark("review-decided", os.getpid(), d.approved, d.comment)
    return {{"approved": d.approved, "comment": d.comment}}


@flow.node(after="review", retry_count=0)
def send(state):
    mark("send", os.getpid(), state["comment"])
    return {{"sent": True}}
'''

# One racing approver. argv: mode (flow|store), run id, comment, ready file, go file.
CHILD_SCRIPT = """\
import json
import os
import sys
import time

import durable_nb as dnb
import race_flow

mode, run_id, comment, ready_file, go_file = sys.argv[1:6]

# Warm up before the race: imports done, store connection open, run visible and paused.
warm = dnb.get_run(run_id, store=race_flow.STORE)
assert warm.status == "paused", warm.status
race_flow.flow.get(run_id)

with open(ready_file, "w") as handle:
    handle.write(str(os.getpid()))

while not os.path.exists(go_file):
    time.sleep(0.001)
with open(go_file) as handle:
    go_at = float(handle.read())
while time.time() < go_at:
    remaining = go_at - time.time()
    if remaining > 0.002:
        time.sleep(remaining - 0.002)

started = time.time()
result = {"pid": os.getpid(), "comment": comment, "started": started}
try:
    if mode == "flow":
        run = race_flow.flow.approve(run_id, approved=True, comment=comment)
    else:
        run = dnb.approve(run_id, comment=comment, store=race_flow.STORE)
    result.update(outcome="won", status=run.status)
except dnb.AlreadyResumed as exc:
    result.update(outcome="already_resumed", message=str(exc))
except BaseException as exc:  # reported to the parent, which fails the test
    result.update(outcome="error", error=f"{type(exc).__name__}: {exc}")
result["finished"] = time.time()
print("RESULT " + json.dumps(result), flush=True)
sys.exit({"won": 0, "already_resumed": 3}.get(result["outcome"], 2))
"""

EXIT_CODES = {"won": 0, "already_resumed": 3}


def load_flow(tmp_path: Path, store_url: str) -> ModuleType:
    """Write the shared workflow module and the child script; import the module here too."""
    side = tmp_path / "side_effects.txt"
    module_file = tmp_path / "race_flow.py"
    module_file.write_text(FLOW_MODULE.format(store=store_url, side=str(side)))
    (tmp_path / "race_child.py").write_text(CHILD_SCRIPT)
    # A unique module name: each test has its own store and side file baked into the module.
    name = f"race_flow_{abs(hash(str(tmp_path)))}"
    spec = importlib.util.spec_from_file_location(name, module_file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def side_effects(tmp_path: Path) -> list[list[str]]:
    path = tmp_path / "side_effects.txt"
    if not path.exists():
        return []
    return [line.split(" ") for line in path.read_text().splitlines()]


def race(tmp_path: Path, mode: str, run_id: str, processes: int, trial: int) -> list[dict]:
    """Start ``processes`` approvers, release them at one instant, and return their results."""
    work = tmp_path / f"trial-{trial}"
    work.mkdir()
    go_file = work / "go"
    env = env_with_repo()
    children: list[subprocess.Popen[str]] = []
    try:
        for i in range(processes):
            children.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        str(tmp_path / "race_child.py"),
                        mode,
                        run_id,
                        f"child-{i}",
                        str(work / f"ready-{i}"),
                        str(go_file),
                    ],
                    cwd=tmp_path,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        deadline = time.monotonic() + READY_TIMEOUT
        while not all((work / f"ready-{i}").exists() for i in range(processes)):
            dead = [c for c in children if c.poll() is not None]
            if dead:
                _, err = dead[0].communicate()
                pytest.fail(f"a child exited before the start signal (rc={dead[0].returncode}):\n{err}")
            if time.monotonic() > deadline:
                pytest.fail("children did not get ready in time")
            time.sleep(0.005)
        # Write the start instant atomically: children never read a half-written file.
        tmp_go = work / "go.tmp"
        tmp_go.write_text(repr(time.time() + START_DELAY))
        os.replace(tmp_go, go_file)

        results = []
        for i, child in enumerate(children):
            out, err = child.communicate(timeout=CHILD_TIMEOUT)
            lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
            assert len(lines) == 1, f"child {i} (rc={child.returncode}) printed no result:\n{out}\n{err}"
            result = json.loads(lines[0][len("RESULT ") :])
            assert result["outcome"] in EXIT_CODES, f"child {i} failed: {result.get('error')}\n{err}"
            assert child.returncode == EXIT_CODES[result["outcome"]], (child.returncode, result, err)
            results.append(result)
        return results
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()


def check_race(results: list[dict], processes: int) -> dict:
    """Exactly one winner, every other child AlreadyResumed, and they really started together."""
    assert len(results) == processes
    outcomes = Counter(r["outcome"] for r in results)
    assert outcomes == {"won": 1, "already_resumed": processes - 1}, results
    assert len({r["pid"] for r in results}) == processes  # really separate processes
    starts = [r["started"] for r in results]
    # The shared start instant worked: all approvals began within a short window.
    assert max(starts) - min(starts) < 2.0, starts
    (winner,) = [r for r in results if r["outcome"] == "won"]
    return winner


def check_finished_run(store_url: str, run_id: str, winner_comment: str) -> None:
    """The run completed once, with one recorded decision: the winner's."""
    final = dnb.get_run(run_id, store=store_url)
    assert final.status == "completed", (final.status, final.error)
    assert final.pending_interrupt is None
    assert final.state["approved"] is True
    assert final.state["comment"] == winner_comment
    assert final.state["sent"] is True

    steps = Counter(dnb.history(run_id, store=store_url)["step"])
    assert steps["approved:review"] == 1, steps
    assert steps["gate:review"] == 1, steps
    assert steps["after:classify"] == 1, steps
    assert steps["after:review"] == 1, steps
    assert steps["after:send"] == 1, steps
    assert steps["run_end"] == 1, steps


def check_side_effects(tmp_path: Path, parent_pid: int, resumer_pid: int, winner_comment: str) -> None:
    """Post-gate bodies ran exactly once, in the process that continued the run."""
    lines = side_effects(tmp_path)
    kinds = Counter(line[0] for line in lines)
    assert kinds == {"classify": 1, "review-enter": 2, "review-decided": 1, "send": 1}, lines
    by_kind = {line[0]: line for line in lines if line[0] != "review-enter"}
    assert by_kind["classify"][1] == str(parent_pid)
    enters = [line[1] for line in lines if line[0] == "review-enter"]
    assert enters == [str(parent_pid), str(resumer_pid)], lines
    assert by_kind["review-decided"][1:] == [str(resumer_pid), "True", winner_comment], lines
    assert by_kind["send"][1:] == [str(resumer_pid), winner_comment], lines


def start_paused_run(flow: dnb.Workflow, tmp_path: Path, trial: int) -> str:
    run = flow.run({"ticket": f"race-{trial}"})
    assert run.status == "paused", (run.status, run.error)
    assert run.pending_interrupt is not None
    assert run.pending_interrupt["node_id"] == "review"
    # Only the pre-gate work has happened so far.
    kinds = Counter(line[0] for line in side_effects(tmp_path))
    assert kinds == {"classify": 1, "review-enter": 1}, kinds
    return run.id


def trial_params() -> list:
    return [pytest.param(trial, 2 + trial % 7, id=f"trial{trial:02d}-{2 + trial % 7}procs") for trial in range(TRIALS)]


@pytest.mark.parametrize(("trial", "processes"), trial_params())
def test_flow_approve_race_across_processes(tmp_path: Path, store_url: str, trial: int, processes: int) -> None:
    """The claim of a gate is atomic across processes: of 2-8 processes calling ``flow.approve``
    on one paused run at the same instant, exactly one wins and continues the run to
    completion; all others raise AlreadyResumed; the post-gate node bodies run exactly once,
    in the winner's process, and the history holds exactly one ``approved:review``."""
    module = load_flow(tmp_path, store_url)
    run_id = start_paused_run(module.flow, tmp_path, trial)

    results = race(tmp_path, "flow", run_id, processes, trial)

    winner = check_race(results, processes)
    assert winner["status"] == "completed", winner
    check_finished_run(store_url, run_id, winner["comment"])
    check_side_effects(tmp_path, os.getpid(), winner["pid"], winner["comment"])


@pytest.mark.parametrize(("trial", "processes"), trial_params())
def test_store_approve_race_then_single_resume(tmp_path: Path, store_url: str, trial: int, processes: int) -> None:
    """The claim is atomic across processes without the workflow's code: of 2-8 processes calling store-level
    ``dnb.approve`` on one paused run at the same instant, exactly one records its decision
    (run becomes ``pending``, no node code runs in any child) and all others raise
    AlreadyResumed; one ``flow.resume`` in the parent then completes the run with the
    winner's decision, running the post-gate node bodies exactly once."""
    module = load_flow(tmp_path, store_url)
    run_id = start_paused_run(module.flow, tmp_path, trial)

    results = race(tmp_path, "store", run_id, processes, trial)

    winner = check_race(results, processes)
    assert winner["status"] == "pending", winner
    # Recording the decision ran no workflow code in any child.
    kinds = Counter(line[0] for line in side_effects(tmp_path))
    assert kinds == {"classify": 1, "review-enter": 1}, kinds
    waiting = dnb.get_run(run_id, store=store_url)
    assert waiting.status == "pending"
    assert waiting.pending_interrupt is None
    assert Counter(dnb.history(run_id, store=store_url)["step"])["approved:review"] == 1

    run = module.flow.resume(run_id)
    assert run.status == "completed", (run.status, run.error)
    assert run.state["comment"] == winner["comment"]

    check_finished_run(store_url, run_id, winner["comment"])
    check_side_effects(tmp_path, os.getpid(), os.getpid(), winner["comment"])
    # The decision is consumed: a late approver finds no gate, a second resume nothing to do.
    with pytest.raises(dnb.AlreadyResumed):
        dnb.approve(run_id, store=store_url)
    with pytest.raises(dnb.AlreadyResumed):
        module.flow.resume(run_id)
