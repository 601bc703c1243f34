"""Separate processes racing to approve one paused run: the claim is atomic, exactly one wins.

Each trial starts a run that pauses at a gate, then has 2 to 8 child *processes* (not
threads) all import the same workflow module, open the store, wait at a shared start
signal and then approve the same run at the same instant. The children are long-lived
approvers (tests/racekit.py) started once for the module and given one trial after another:
an interpreter start costs more than a trial. Exactly one child must win; every
other one must get ``AlreadyResumed``; the gated node's post-gate body and the node after
the gate must run exactly once (counted in a side-effect file the node bodies append to).
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from conftest import env_with_repo
from racekit import ApproverPool

import durable_nb as dnb

pytestmark = pytest.mark.slow

TRIALS = 20  # per variant
START_DELAY = 0.15  # seconds between the start signal and the instant every child approves
READY_TIMEOUT = 60.0
CHILD_TIMEOUT = 60.0
OUTCOMES = ("won", "already_resumed")

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


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApproverPool]:
    """Approver processes shared by every trial of this module; each must end cleanly at the end."""
    approvers = ApproverPool(tmp_path_factory.mktemp("approvers"), env_with_repo)
    yield approvers
    codes = approvers.close()
    assert all(code == 0 for code in codes.values()), f"approvers did not end cleanly: {codes}"


def load_flow(tmp_path: Path, store_url: str) -> ModuleType:
    """Write the shared workflow module and import it here too (the approvers load the same file)."""
    side = tmp_path / "side_effects.txt"
    module_file = tmp_path / "race_flow.py"
    module_file.write_text(FLOW_MODULE.format(store=store_url, side=str(side)))
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


def race(pool: ApproverPool, tmp_path: Path, mode: str, run_id: str, processes: int, trial: int) -> list[dict]:
    """Have ``processes`` approvers warm up, release them at one instant, and return their results."""
    work = tmp_path / f"trial-{trial}"
    work.mkdir()
    go_file = work / "go"
    approvers = pool.take(processes)
    try:
        for i, approver in enumerate(approvers):
            approver.send(
                {
                    "mode": mode,
                    "module": str(tmp_path / "race_flow.py"),
                    "run_id": run_id,
                    "comment": f"child-{i}",
                    "ready": str(work / f"ready-{i}"),
                    "go": str(go_file),
                }
            )
        deadline = time.monotonic() + READY_TIMEOUT
        while not all((work / f"ready-{i}").exists() for i in range(processes)):
            early = [a for a in approvers if a.answered() or a.proc.poll() is not None]
            if early:
                pytest.fail(f"an approver stopped before the start signal:\n{early[0].result(1.0)}")
            if time.monotonic() > deadline:
                pytest.fail("approvers did not get ready in time")
            time.sleep(0.005)
        # Write the start instant atomically: approvers never read a half-written file.
        tmp_go = work / "go.tmp"
        tmp_go.write_text(repr(time.time() + START_DELAY))
        os.replace(tmp_go, go_file)

        results = []
        for i, approver in enumerate(approvers):
            result = approver.result(CHILD_TIMEOUT)
            assert result["outcome"] in OUTCOMES, f"approver {i} failed: {result.get('error')}\n{approver.stderr()}"
            results.append(result)
        return results
    except BaseException:
        pool.discard()  # workers may be mid-order: the next trial gets fresh ones
        raise


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
def test_flow_approve_race_across_processes(
    pool: ApproverPool, tmp_path: Path, store_url: str, trial: int, processes: int
) -> None:
    """The claim of a gate is atomic across processes: of 2-8 processes calling ``flow.approve``
    on one paused run at the same instant, exactly one wins and continues the run to
    completion; all others raise AlreadyResumed; the post-gate node bodies run exactly once,
    in the winner's process, and the history holds exactly one ``approved:review``."""
    module = load_flow(tmp_path, store_url)
    run_id = start_paused_run(module.flow, tmp_path, trial)

    results = race(pool, tmp_path, "flow", run_id, processes, trial)

    winner = check_race(results, processes)
    assert winner["status"] == "completed", winner
    check_finished_run(store_url, run_id, winner["comment"])
    check_side_effects(tmp_path, os.getpid(), winner["pid"], winner["comment"])


@pytest.mark.parametrize(("trial", "processes"), trial_params())
def test_store_approve_race_then_single_resume(
    pool: ApproverPool, tmp_path: Path, store_url: str, trial: int, processes: int
) -> None:
    """The claim is atomic across processes without the workflow's code: of 2-8 processes calling store-level
    ``dnb.approve`` on one paused run at the same instant, exactly one records its decision
    (run becomes ``pending``, no node code runs in any child) and all others raise
    AlreadyResumed; one ``flow.resume`` in the parent then completes the run with the
    winner's decision, running the post-gate node bodies exactly once."""
    module = load_flow(tmp_path, store_url)
    run_id = start_paused_run(module.flow, tmp_path, trial)

    results = race(pool, tmp_path, "store", run_id, processes, trial)

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
