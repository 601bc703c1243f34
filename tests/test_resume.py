"""Resume rules, and who may resume: a run owned by a live process is never taken over."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import env_with_repo

import durable_nb as dnb
from durable_nb._loop import run_sync
from durable_nb.model import Commit, RunStatus, RunUpdate


def gated_flow(store_url: str, calls: list[str]) -> dnb.Workflow:
    flow = dnb.Workflow("resume-rules", store=store_url)

    @flow.node()
    def prepare(state):
        calls.append("prepare")
        return {"prepared": True}

    @flow.node(after="prepare")
    def review(state):
        calls.append("review")
        decision = dnb.gate("ok?")
        return {"approved": decision.approved}

    return flow


def test_resume_of_paused_run_points_to_approve(store_url: str) -> None:
    """Resuming a paused run raises NotResumable, naming approve."""
    flow = gated_flow(store_url, [])
    run = flow.run({})
    with pytest.raises(dnb.NotResumable, match="approve"):
        flow.resume(run.id)
    assert dnb.get_run(run.id, store=store_url).status == "paused"


def test_resume_of_completed_run_raises_already_resumed(store_url: str) -> None:
    """A completed run has a run_end tombstone; resume raises AlreadyResumed."""
    flow = gated_flow(store_url, [])
    run = flow.approve(flow.run({}).id)
    assert run.status == "completed"
    with pytest.raises(dnb.AlreadyResumed, match="fork"):
        flow.resume(run.id)


def test_resume_with_value_answers_an_interrupt(store_url: str) -> None:
    """Resume(value) answers interrupt(); the node re-runs and receives the value."""
    flow = dnb.Workflow("interrupts", store=store_url)

    @flow.node()
    def ask(state):
        answer = dnb.interrupt("pick a model", {"options": ["small", "large"]})
        return {"model": answer}

    run = flow.run({})
    assert run.status == "paused"
    assert run.pending_interrupt["reason"] == "pick a model"
    done = flow.resume(run.id, dnb.Resume("large"))
    assert done.status == "completed"
    assert done.state == {"model": "large"}


def test_resume_after_store_level_approve(store_url: str) -> None:
    """durable_nb.approve records the decision without code; the workflow's resume continues."""
    calls: list[str] = []
    flow = gated_flow(store_url, calls)
    run = flow.run({})
    decided = dnb.approve(run.id, comment="looks fine", by="bob", store=store_url)
    assert decided.status == "pending"
    assert calls == ["prepare", "review"]
    done = flow.resume(run.id)
    assert done.status == "completed"
    assert done.state["approved"] is True
    assert calls == ["prepare", "review", "review"]


def test_resume_of_cancelled_run(store_url: str) -> None:
    """A cancelled (paused) run stays resumable; the gate asks again."""
    calls: list[str] = []
    flow = gated_flow(store_url, calls)
    run = flow.run({})
    cancelled = dnb.cancel(run.id, store=store_url)
    assert cancelled.status == "cancelled"
    assert cancelled.error == "Cancelled by user"
    with pytest.raises(dnb.NotCancellable):
        dnb.cancel(run.id, store=store_url)
    again = flow.resume(run.id)
    assert again.status == "paused"
    assert flow.approve(run.id).status == "completed"
    assert calls.count("prepare") == 1


def _strand(store_url: str, run_id: str, owner: str | None) -> None:
    store = dnb.connect(store_url)
    current = run_sync(store.get_run(run_id))
    run_sync(
        store.commit(
            Commit(
                run_id=run_id,
                run=RunUpdate(status=RunStatus.RUNNING, owner=owner, lease_until=None),
                expect_owner=current.owner,
            )
        )
    )


def test_resume_of_crashed_run_whose_owner_is_gone(store_url: str, tmp_path: Path) -> None:
    """A run left running by a dead process is resumed from its last checkpoint."""
    calls: list[str] = []
    flow = gated_flow(store_url, calls)
    run = dnb.approve(flow.run({}).id, store=store_url)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    import socket

    _strand(store_url, run.id, f"{socket.gethostname()}:{dead_pid}:0.deadbeef")
    done = flow.resume(run.id)
    assert done.status == "completed"
    assert calls == ["prepare", "review", "review"]


def test_resume_of_run_owned_by_live_process_is_refused(store_url: str, tmp_path: Path) -> None:
    """A run owned by a live process is never taken over."""
    flow = gated_flow(store_url, [])
    run = dnb.approve(flow.run({}).id, store=store_url)
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
            import sys, time
            from durable_nb.engine.runs.ownership import this_owner
            print(this_owner(), flush=True)
            time.sleep(30)
            """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env_with_repo(),
    )
    try:
        owner = child.stdout.readline().strip()
        _strand(store_url, run.id, owner)
        with pytest.raises(dnb.RunOwnedElsewhere, match="never taken"):
            flow.resume(run.id)
        assert dnb.get_run(run.id, store=store_url).record.owner == owner
    finally:
        child.kill()
        child.wait()
    # Once that process is gone, the same resume succeeds.
    assert flow.resume(run.id).status == "completed"


def test_resume_of_unknown_run(store_url: str) -> None:
    """An unknown run id raises RunNotFound."""
    flow = gated_flow(store_url, [])
    with pytest.raises(dnb.RunNotFound):
        flow.resume("no-such-run")


def test_resume_with_other_workflow_is_refused(store_url: str) -> None:
    """A run resumed with another workflow's object raises WorkflowMismatch."""
    flow = gated_flow(store_url, [])
    run = flow.run({})
    other = dnb.Workflow("something-else", store=store_url)
    with pytest.raises(dnb.WorkflowMismatch):
        other.resume(run.id)
    assert dnb.get_run(run.id, store=store_url).status == "paused"
