"""Leases and recovery: live owners are never displaced; stranded runs are resumed or failed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import env_with_repo

import durable_nb as dnb

SLOW_FLOW = """
import os, sys, time
import durable_nb as dnb

flow = dnb.Workflow("slow", store={store!r})
MARK = {mark!r}


@flow.node(retry_count=0)
def first(state):
    return {{"first": True}}


@flow.node(after="first", retry_count=0)
def slow(state):
    with open(MARK, "a") as handle:
        handle.write("slow %d\\n" % os.getpid())
    release = os.environ.get("RELEASE")
    if release:  # runs until the test says so, however slowly the machine goes
        deadline = time.monotonic() + 300
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.05)
    else:
        time.sleep(float(os.environ.get("SLOW_SECONDS", "3")))
    return {{"slow": True}}


if __name__ == "__main__":
    if sys.argv[1] == "run":
        print(flow.run({{}}).status, flush=True)
    else:
        # At least this long and this many attempts: a loaded machine gives fewer attempts per second.
        deadline = time.monotonic() + float(sys.argv[2])
        least = int(sys.argv[3]) if len(sys.argv) > 3 else 1
        reports = []
        while time.monotonic() < deadline or len(reports) < least:
            reports.append(dnb.recover([flow]))
            time.sleep(0.1)
        print(sum(len(r.resumed) + len(r.failed) for r in reports), len(reports), flush=True)
"""


def setup(tmp_path: Path, store_url: str) -> tuple[Path, Path]:
    module = tmp_path / "slow_flow.py"
    mark = tmp_path / "mark.txt"
    module.write_text(SLOW_FLOW.format(store=store_url, mark=str(mark)))
    return module, mark


def child_env(host: str, **extra: str) -> dict[str, str]:
    env = env_with_repo()
    env["DURABLE_NB_HOST"] = host
    env["DURABLE_NB_LEASE_SECONDS"] = "1"
    env.update(extra)
    return env


def wait_for_mark(mark: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not (mark.exists() and mark.read_text()):
        assert time.monotonic() < deadline, "the slow node never started"
        time.sleep(0.02)


def test_run_longer_than_its_lease_is_never_taken(tmp_path: Path, store_url: str) -> None:
    """A runs a node for over 3 lease periods while B, on another host, recovers in a loop: B never takes
    A's run, and A's lease moves on meanwhile. A's node ends only once B is done, however slow the machine."""
    module, mark = setup(tmp_path, store_url)
    release = tmp_path / "release"
    a = subprocess.Popen(
        [sys.executable, str(module), "run"],
        stdout=subprocess.PIPE,
        text=True,
        env=child_env("host-a", RELEASE=str(release)),
    )
    try:
        wait_for_mark(mark)
        run_id = dnb.runs(store=store_url)["run_id"].iloc[0]
        first_lease = dnb.get_run(run_id, store=store_url).record.lease_until
        b = subprocess.run(
            [sys.executable, str(module), "recover", "3.5", "5"],
            capture_output=True,
            text=True,
            env=child_env("host-b"),
            timeout=300,
        )
        assert b.returncode == 0, b.stderr
        touched, loops = map(int, b.stdout.split())
        assert touched == 0 and loops >= 5
        last_lease = dnb.get_run(run_id, store=store_url).record.lease_until
        assert dnb.get_run(run_id, store=store_url).status == "running"  # B's loops all met A at work
        release.touch()
        out, _ = a.communicate(timeout=120)
    finally:
        a.kill()
    assert out.strip() == "completed"
    # The 1 s lease was renewed while the node ran (else B would have found it expired and taken the run).
    assert first_lease is not None and last_lease is not None and last_lease > first_lease
    assert mark.read_text().count("slow") == 1


def test_dead_owner_on_another_host_is_taken_after_its_lease(tmp_path: Path, store_url: str) -> None:
    """Across machines only the lease decides: once it expires, recover() resumes the run."""
    module, mark = setup(tmp_path, store_url)
    a = subprocess.Popen(
        [sys.executable, str(module), "run"], stdout=subprocess.PIPE, text=True, env=child_env("host-a")
    )
    wait_for_mark(mark)
    os.kill(a.pid, signal.SIGKILL)
    a.wait()
    b = subprocess.run(
        [sys.executable, str(module), "recover", "3"],
        capture_output=True,
        text=True,
        env=child_env("host-b", SLOW_SECONDS="0"),
        timeout=60,
    )
    assert b.returncode == 0, b.stderr
    touched, _ = map(int, b.stdout.split())
    assert touched == 1
    run = dnb.get_run(dnb.runs(store=store_url)["run_id"].iloc[0], store=store_url)
    assert run.status == "completed"
    assert mark.read_text().count("slow") == 2  # the node in flight at the kill ran again


def test_recover_without_the_workflow_marks_failed(tmp_path: Path, store_url: str) -> None:
    """A stranded run whose workflow is not given is marked failed with the restart message, and resumes."""
    module, mark = setup(tmp_path, store_url)
    a = subprocess.Popen([sys.executable, str(module), "run"], stdout=subprocess.PIPE, text=True, env=env_with_repo())
    wait_for_mark(mark)
    os.kill(a.pid, signal.SIGKILL)
    a.wait()
    report = dnb.recover(store=store_url)
    run_id = dnb.runs(store=store_url)["run_id"].iloc[0]
    assert report.failed == [run_id]
    run = dnb.get_run(run_id, store=store_url)
    assert run.status == "failed"
    assert run.error == "Interrupted by restart — resume from last checkpoint"
    assert list(dnb.history(run_id, store=store_url)["step"]) == ["after:first"]
    os.environ["SLOW_SECONDS"] = "0"
    try:
        sys.path.insert(0, str(tmp_path))
        import slow_flow

        done = slow_flow.flow.resume(run_id)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("slow_flow", None)
        del os.environ["SLOW_SECONDS"]
    assert done.status == "completed"


def test_recover_leaves_paused_and_live_runs_alone(store_url: str, tmp_path: Path) -> None:
    """Paused runs and runs of live processes (this one) are left alone."""
    flow = dnb.Workflow("gated", store=store_url)

    @flow.node()
    def review(state):
        return {"ok": dnb.gate("ok?").approved}

    paused = flow.run({})
    report = dnb.recover([flow])
    assert report.resumed == [] and report.failed == []
    assert dnb.get_run(paused.id, store=store_url).status == "paused"

    module, mark = setup(tmp_path, store_url)
    a = subprocess.Popen([sys.executable, str(module), "run"], stdout=subprocess.PIPE, text=True, env=env_with_repo())
    try:
        wait_for_mark(mark)
        report = dnb.recover(store=store_url)
        live = next(r for r in dnb.runs(store=store_url).itertuples() if r.name == "slow").run_id
        assert live in report.left_alone
        assert report.failed == []
        assert a.communicate(timeout=60)[0].strip() == "completed"
    finally:
        a.kill()


def test_recover_resumes_runs_approved_elsewhere(store_url: str) -> None:
    """A run approved without its code waits as pending; recover() with its workflow continues it."""
    flow = dnb.Workflow("approved-elsewhere", store=store_url)

    @flow.node()
    def review(state):
        return {"ok": dnb.gate("ok?").approved}

    run = flow.run({})
    dnb.approve(run.id, store=store_url)
    assert dnb.recover(store=store_url).left_alone == [run.id]
    report = dnb.recover([flow])
    assert [r.id for r in report.resumed] == [run.id]
    assert report.resumed[0].status == "completed"


def test_a_task_that_lost_the_race_for_a_run_leaves_the_winners_run_alive() -> None:
    # A request and the periodic recovery of one server both try to take a pending run: the
    # loser's block ends first, and the winner's run must not then look abandoned (the next
    # recovery would continue it a second time, in the same process).
    from durable_nb.engine.runs.ownership import active, owner_alive, this_owner

    with active("raced"):
        with active("raced"):
            pass  # the loser: its compare-and-set failed
        assert owner_alive("raced", this_owner(), None)
    assert not owner_alive("raced", this_owner(), None)
