"""Gate deadlines: a floor of 1 second, no ceiling, applied lazily by whoever looks at the run.

Nothing waits for a gate's deadline: no thread, timer or process. Whoever next looks at the
run (get_run, status, approve, resume, recover) applies it: ``on_timeout="reject"`` records a
rejection by ``durable_nb (gate timeout)`` and leaves the run ``pending``; ``"fail"`` fails the
run (resumable). A decision arriving after the deadline is refused and not recorded.

Two ways of letting time pass: real sleeps just past the 1 second floor, and "weeks passing",
simulated by moving a pending row's ``created_at`` and ``expires_at`` back in the SQLite file.
"""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import db_path, env_with_repo, execute_sql, new_store

import durable_nb as dnb
from durable_nb._loop import run_sync
from durable_nb.model import CheckpointRecord, PendingInterrupt
from durable_nb.store.sqlite import SQLiteStore

THREE_WEEKS = 21 * 24 * 60 * 60  # 1814400 seconds
TIMEOUT_BY = "durable_nb (gate timeout)"
PAST_THE_FLOOR = 1.1  # seconds slept to pass a 1 second deadline


# -- helpers --------------------------------------------------------------------------------


class Calls:
    """What the gated flow's nodes saw: how often each ran and every decision gate() returned."""

    def __init__(self) -> None:
        self.prepare = 0
        self.review = 0
        self.decisions: list[dnb.Decision] = []


def gated_flow(
    store: Any,
    name: str = "deadlines",
    *,
    timeout: Any = 1,
    on_timeout: str = "reject",
    calls: Calls | None = None,
) -> dnb.Workflow:
    """prepare -> review (a gate with a deadline) -> publish, on ``store`` (a URL or a store)."""
    flow = dnb.Workflow(name, store=store)
    seen = calls if calls is not None else Calls()

    @flow.node(retry_count=0)
    def prepare(state):
        seen.prepare += 1
        return {"draft": "Quarterly report"}

    @flow.node(after="prepare", retry_count=0)
    def review(state):
        seen.review += 1
        decision = dnb.gate("publish?", {"draft": state["draft"]}, timeout_seconds=timeout, on_timeout=on_timeout)
        seen.decisions.append(decision)
        return {"approved": decision.approved, "comment": decision.comment, "by": decision.by}

    @flow.node(after="review", retry_count=0)
    def publish(state):
        return {"published": state["approved"]}

    return flow


def store_of(store_url: str) -> dnb.Store:
    return dnb.connect(store_url)


def pending_rows(store_url: str, run_id: str) -> list[PendingInterrupt]:
    """The raw pending rows (reading them applies no deadline)."""
    return run_sync(store_of(store_url).pending_interrupts(run_id))


def checkpoints(store_url: str, run_id: str) -> list[CheckpointRecord]:
    return run_sync(store_of(store_url).list_checkpoints(run_id))


def steps(store_url: str, run_id: str) -> list[str]:
    return [c.step for c in checkpoints(store_url, run_id)]


def decisions(store_url: str, run_id: str) -> list[dict[str, Any]]:
    """Every decision recorded in an ``approved:<node>`` checkpoint, in order."""
    return [c.decision for c in checkpoints(store_url, run_id) if c.step.startswith("approved:")]


def event_types(store_url: str, run_id: str) -> list[str]:
    return [e.type for e in run_sync(store_of(store_url).list_events(run_id))]


def raw_status(store_url: str, run_id: str) -> str:
    """The stored status, read without applying any deadline."""
    return run_sync(store_of(store_url).get_run(run_id)).status.value


def let_time_pass(store_url: str, run_id: str, seconds: float) -> None:
    """Simulate ``seconds`` passing for a run's open gates: move their rows back in time."""
    [(moved,)] = execute_sql(
        store_url,
        "UPDATE pending_interrupts SET created_at = created_at - ?, expires_at = expires_at - ? WHERE run_id = ?",
        (seconds, seconds, run_id),
    )
    assert moved >= 1, "the run has no open gate to age"


def timeout_comment(seconds: str) -> str:
    return f"Gate 'publish?' of node 'review' timed out after {seconds} s"


# -- 1. the floor, and no ceiling -------------------------------------------------------------


@pytest.mark.parametrize(
    ("timeout", "message"),
    [
        (0.5, "below the 1 second floor"),
        (0, "below the 1 second floor"),
        (-1, "below the 1 second floor"),
        (math.nan, "must be a number of seconds"),
        ("10", "must be a number of seconds"),
        (True, "must be a number of seconds"),
    ],
    ids=["half-second", "zero", "negative", "nan", "text", "bool"],
)
def test_timeout_below_the_floor_or_not_a_number_fails_the_node(store_url: str, timeout: Any, message: str) -> None:
    """A gate timeout below 1 second (or not a number) fails the node with a clear message."""
    flow = gated_flow(store_url, timeout=timeout)
    run = flow.run({})
    assert run.status == "failed"
    assert run.error is not None
    assert run.error.startswith("Node 'review' failed: InvalidInput: timeout_seconds")
    assert message in run.error
    assert run.pending_interrupt is None
    assert pending_rows(store_url, run.id) == []
    assert steps(store_url, run.id) == ["after:prepare", "failed:review", "run_end"]


def test_unknown_on_timeout_fails_the_node(store_url: str) -> None:
    """On expiry a gate rejects or fails the run; anything else is refused up front."""
    run = gated_flow(store_url, on_timeout="approve").run({})
    assert run.status == "failed"
    assert "on_timeout must be 'reject' or 'fail'" in (run.error or "")
    assert pending_rows(store_url, run.id) == []


@pytest.mark.parametrize(("timeout", "on_timeout"), [(1, "reject"), (THREE_WEEKS, "fail")], ids=["floor", "3-weeks"])
def test_floor_and_weeks_are_accepted_and_stored(store_url: str, timeout: int, on_timeout: str) -> None:
    """1 second (the floor) and 3 weeks (no ceiling) pause the run with the deadline stored."""
    before = time.time()
    run = gated_flow(store_url, timeout=timeout, on_timeout=on_timeout).run({})
    assert run.status == "paused"
    assert run.pending_interrupt == {
        "reason": "publish?",
        "context": {"draft": "Quarterly report"},
        "node_id": "review",
        "agent_path": None,
    }
    [row] = pending_rows(store_url, run.id)
    assert row.on_timeout == on_timeout
    assert row.expires_at is not None
    assert row.expires_at - row.created_at == pytest.approx(timeout, abs=1e-6)
    assert before <= row.created_at <= time.time()
    gate = [c for c in checkpoints(store_url, run.id) if c.step == "gate:review"]
    assert len(gate) == 1
    assert gate[0].interrupt["timeout_seconds"] == timeout
    assert gate[0].interrupt["on_timeout"] == on_timeout


# -- 2. reject on expiry, applied by get_run ---------------------------------------------------


def test_reject_on_expiry_is_applied_lazily_by_get_run(store_url: str) -> None:
    """After a real 1 s deadline, get_run records the timeout rejection; resume completes."""
    calls = Calls()
    flow = gated_flow(store_url, timeout=1, on_timeout="reject", calls=calls)
    run = flow.run({})
    assert run.status == "paused"
    assert dnb.get_run(run.id, store=store_url).status == "paused"  # the deadline is not reached yet

    time.sleep(PAST_THE_FLOOR)
    # Nothing applied the deadline in the background: the row and the paused status are untouched.
    assert raw_status(store_url, run.id) == "paused"
    assert len(pending_rows(store_url, run.id)) == 1
    assert decisions(store_url, run.id) == []

    looked = dnb.get_run(run.id, store=store_url)
    assert looked.status == "pending"
    assert looked.pending_interrupt is None
    assert looked.pending_interrupts == []
    assert pending_rows(store_url, run.id) == []
    assert steps(store_url, run.id) == ["after:prepare", "gate:review", "approved:review"]
    [decision] = decisions(store_url, run.id)
    assert decision["approved"] is False
    assert decision["comment"] == timeout_comment("1")
    assert decision["by"] == TIMEOUT_BY
    assert event_types(store_url, run.id)[-2:] == ["run_paused", "gate_decided"]
    assert calls.review == 1 and calls.decisions == []  # the node did not run again by itself

    done = flow.resume(run.id)
    assert done.status == "completed"
    assert calls.prepare == 1
    assert calls.review == 2
    [seen] = calls.decisions
    assert seen.approved is False
    assert seen.by == TIMEOUT_BY
    assert seen.comment == timeout_comment("1")
    assert done.state["approved"] is False
    assert done.state["published"] is False
    assert done.state["comment"] == timeout_comment("1")
    assert decisions(store_url, run.id) == [decision]  # resuming recorded nothing more


# -- 3. fail on expiry --------------------------------------------------------------------


def test_fail_on_expiry_after_three_weeks_fails_the_run_and_resume_asks_again(store_url: str) -> None:
    """Weeks later the run is failed naming the gate and timeout; resume re-opens the gate."""
    calls = Calls()
    flow = gated_flow(store_url, timeout=THREE_WEEKS, on_timeout="fail", calls=calls)
    run = flow.run({})
    assert run.status == "paused"
    let_time_pass(store_url, run.id, THREE_WEEKS + 5)

    failed = dnb.get_run(run.id, store=store_url)
    assert failed.status == "failed"
    assert failed.record.error_type == "GateTimeout"
    assert failed.error is not None
    assert failed.error.startswith("Node 'review' failed: Gate 'publish?' of node 'review' timed out after ")
    assert failed.pending_interrupt is None
    assert pending_rows(store_url, run.id) == []
    assert decisions(store_url, run.id) == []  # failing is not a decision
    history = dnb.history(run.id, store=store_url)
    assert history["step"].tolist() == ["after:prepare", "gate:review", "failed:review", "run_end"]
    failed_checkpoint = [c for c in checkpoints(store_url, run.id) if c.step == "failed:review"]
    assert failed_checkpoint[0].queue[0] == "review"
    assert failed_checkpoint[0].error == failed.error
    types = event_types(store_url, run.id)
    assert types[-2:] == ["gate_decided", "run_failed"]
    assert types.count("gate_decided") == 1

    resumed_at = time.time()
    again = flow.resume(run.id)
    assert again.status == "paused"
    assert again.pending_interrupt is not None
    assert again.pending_interrupt["reason"] == "publish?"
    [row] = pending_rows(store_url, run.id)
    assert row.created_at >= resumed_at
    assert row.expires_at is not None
    assert row.expires_at - row.created_at == pytest.approx(THREE_WEEKS, abs=1e-6)
    assert row.expires_at > time.time() + THREE_WEEKS - 60
    assert calls.prepare == 1  # committed work is not redone
    assert calls.review == 2
    assert steps(store_url, run.id)[-1] == "gate:review"

    done = flow.approve(run.id, comment="late but fine", by="dana")
    assert done.status == "completed"
    assert done.state["approved"] is True
    assert done.state["by"] == "dana"


# -- 4. who applies the deadline -----------------------------------------------------------


@pytest.mark.parametrize("caller", ["dnb.status", "flow.status"])
@pytest.mark.parametrize("on_timeout", ["reject", "fail"])
def test_status_applies_an_expired_deadline(store_url: str, caller: str, on_timeout: str) -> None:
    """Asking for a run's status applies its expired deadline before counting."""
    flow = gated_flow(store_url, timeout=THREE_WEEKS, on_timeout=on_timeout)

    def status(run_id: str) -> dict[str, Any]:
        return dnb.status(run_id, store=store_url) if caller == "dnb.status" else flow.status(run_id)

    run = flow.run({})
    before = status(run.id)
    assert before["status"] == "paused"
    assert before["node_counts"]["suspended"] == 1

    let_time_pass(store_url, run.id, THREE_WEEKS + 5)
    after = status(run.id)
    review = [e["status"] for e in after["executions"] if e["address"]["node_id"] == "review"]
    assert after["node_counts"]["suspended"] == 0
    if on_timeout == "reject":
        assert after["status"] == "pending"
        assert review == ["pending"]  # decided, waiting to re-run
        assert [d["by"] for d in decisions(store_url, run.id)] == [TIMEOUT_BY]
    else:
        assert after["status"] == "failed"
        assert review == ["failed"]
        assert after["node_counts"]["failed"] == 1
    assert raw_status(store_url, run.id) == after["status"]


def test_resume_continues_a_paused_run_whose_gate_expired(store_url: str) -> None:
    """Resume refuses a paused run, but once its deadline passed it applies it and continues."""
    calls = Calls()
    flow = gated_flow(store_url, timeout=THREE_WEEKS, calls=calls)
    run = flow.run({})
    with pytest.raises(dnb.NotResumable, match="paused at a gate"):
        flow.resume(run.id)
    assert decisions(store_url, run.id) == []

    let_time_pass(store_url, run.id, THREE_WEEKS + 5)
    done = flow.resume(run.id)
    assert done.status == "completed"
    assert done.state["approved"] is False
    assert done.state["by"] == TIMEOUT_BY
    assert [d.by for d in calls.decisions] == [TIMEOUT_BY]
    assert calls.prepare == 1
    assert steps(store_url, run.id) == [
        "after:prepare",
        "gate:review",
        "approved:review",
        "after:review",
        "after:publish",
        "run_end",
    ]
    assert len(decisions(store_url, run.id)) == 1


def test_recover_with_the_workflow_applies_the_deadline_and_completes_the_run(store_url: str) -> None:
    """recover([flow]) sweeps expired gates and resumes the runs it has the code for."""
    calls = Calls()
    flow = gated_flow(store_url, timeout=THREE_WEEKS, calls=calls)
    expired = flow.run({})
    waiting = flow.run({})  # same deadline, not reached: must be left alone
    let_time_pass(store_url, expired.id, THREE_WEEKS + 5)

    report = dnb.recover([flow], store=store_url)
    assert report.expired_gates == [f"{expired.id}:review"]
    assert [r.id for r in report.resumed] == [expired.id]
    assert report.resumed[0].status == "completed"
    assert report.failed == []

    done = dnb.get_run(expired.id, store=store_url)
    assert done.status == "completed"
    assert done.state["approved"] is False
    assert done.state["published"] is False
    assert done.state["by"] == TIMEOUT_BY
    assert [d.by for d in calls.decisions] == [TIMEOUT_BY]

    still = dnb.get_run(waiting.id, store=store_url)
    assert still.status == "paused"
    assert still.pending_interrupt is not None
    assert decisions(store_url, waiting.id) == []


def test_recover_without_the_workflow_applies_the_decision_and_leaves_the_run_pending(store_url: str) -> None:
    """recover() without the code records the timeout decision; the run waits for the code."""
    calls = Calls()
    rejecting = gated_flow(store_url, timeout=THREE_WEEKS, on_timeout="reject", calls=calls)
    failing = gated_flow(store_url, "deadlines-fail", timeout=THREE_WEEKS, on_timeout="fail")
    to_reject = rejecting.run({})
    to_fail = failing.run({})
    let_time_pass(store_url, to_reject.id, THREE_WEEKS + 5)
    let_time_pass(store_url, to_fail.id, THREE_WEEKS + 5)

    report = dnb.recover(store=store_url)
    assert sorted(report.expired_gates) == sorted([f"{to_reject.id}:review", f"{to_fail.id}:review"])
    assert report.resumed == []
    assert report.failed == []
    assert to_reject.id in report.left_alone

    assert raw_status(store_url, to_reject.id) == "pending"
    assert [d["by"] for d in decisions(store_url, to_reject.id)] == [TIMEOUT_BY]
    assert calls.review == 1  # nothing ran: recover had no code for it
    assert raw_status(store_url, to_fail.id) == "failed"

    # A second sweep finds nothing more to apply and records nothing twice.
    again = dnb.recover(store=store_url)
    assert again.expired_gates == []
    assert len(decisions(store_url, to_reject.id)) == 1

    done = rejecting.resume(to_reject.id)
    assert done.status == "completed"
    assert done.state["approved"] is False


# -- 5. late and early decisions -------------------------------------------------------------


def test_decisions_before_and_after_a_real_deadline(store_url: str) -> None:
    """An approval after the deadline is refused and not recorded; one before it wins for good."""
    calls = Calls()
    flow = gated_flow(store_url, timeout=1, on_timeout="reject", calls=calls)
    early = flow.run({})
    late = flow.run({})
    dnb.approve(early.id, comment="looks good", by="early-erin", store=store_url)
    assert raw_status(store_url, early.id) == "pending"

    time.sleep(PAST_THE_FLOOR)
    with pytest.raises(dnb.AlreadyResumed, match="expired before this decision"):
        dnb.approve(late.id, comment="sorry, on holiday", by="late-larry", store=store_url)
    [recorded] = decisions(store_url, late.id)
    assert recorded["by"] == TIMEOUT_BY
    assert recorded["approved"] is False
    assert recorded["comment"] == timeout_comment("1")
    assert raw_status(store_url, late.id) == "pending"

    # The early approval stays the decision: the passed deadline is never applied to it.
    assert dnb.get_run(early.id, store=store_url).status == "pending"
    report = dnb.recover([flow], store=store_url)
    assert report.expired_gates == []
    assert sorted(r.id for r in report.resumed) == sorted([early.id, late.id])
    early_done = dnb.get_run(early.id, store=store_url)
    assert early_done.status == "completed"
    assert early_done.state["approved"] is True
    assert early_done.state["by"] == "early-erin"
    assert [d["by"] for d in decisions(store_url, early.id)] == ["early-erin"]
    late_done = dnb.get_run(late.id, store=store_url)
    assert late_done.state["approved"] is False
    assert late_done.state["by"] == TIMEOUT_BY
    assert "late-larry" not in {d.by for d in calls.decisions}


@pytest.mark.parametrize("decide", ["dnb.approve", "dnb.reject", "flow.approve", "flow.reject"])
@pytest.mark.parametrize("on_timeout", ["reject", "fail"])
def test_late_decision_after_weeks_is_refused(store_url: str, decide: str, on_timeout: str) -> None:
    """Any decider arriving after the deadline gets AlreadyResumed naming the expiry; nothing of it is kept."""
    calls = Calls()
    flow = gated_flow(store_url, timeout=THREE_WEEKS, on_timeout=on_timeout, calls=calls)
    run = flow.run({})
    let_time_pass(store_url, run.id, THREE_WEEKS + 5)
    deciders = {
        "dnb.approve": lambda: dnb.approve(run.id, by="late-larry", store=store_url),
        "dnb.reject": lambda: dnb.reject(run.id, by="late-larry", store=store_url),
        "flow.approve": lambda: flow.approve(run.id, by="late-larry"),
        "flow.reject": lambda: flow.reject(run.id, by="late-larry"),
    }
    with pytest.raises(dnb.AlreadyResumed, match=f"expired before this decision.*on_timeout is '{on_timeout}'"):
        deciders[decide]()
    assert calls.review == 1  # the refused decider did not continue the run
    if on_timeout == "reject":
        assert raw_status(store_url, run.id) == "pending"
        assert [d["by"] for d in decisions(store_url, run.id)] == [TIMEOUT_BY]
    else:
        assert raw_status(store_url, run.id) == "failed"
        assert decisions(store_url, run.id) == []
    assert pending_rows(store_url, run.id) == []
    # A second late decider is refused too (the gate is gone), still without recording anything.
    with pytest.raises(dnb.AlreadyResumed):
        deciders[decide]()
    assert len(decisions(store_url, run.id)) == (1 if on_timeout == "reject" else 0)


# -- 6. nothing waits ------------------------------------------------------------------------


def _pending_timers(loop: asyncio.AbstractEventLoop) -> list[float]:
    """Seconds until each live timer of ``loop`` fires (CPython keeps them in ``_scheduled``)."""
    scheduled = getattr(loop, "_scheduled", [])
    return [handle.when() - loop.time() for handle in scheduled if not handle.cancelled()]


def _new_threads(baseline: set[threading.Thread]) -> set[threading.Thread]:
    return set(threading.enumerate()) - baseline


def test_a_waiting_gate_costs_no_thread_task_or_timer(store_url: str) -> None:
    """After a gate with a 3-week deadline pauses the run, no thread, task or timer is left waiting."""
    warm_up = gated_flow(store_url, "warm-up", timeout=None)
    warmed = warm_up.run({})  # opens the store's connection thread and a node worker thread
    assert warmed.status == "paused"
    baseline = set(threading.enumerate())

    run = gated_flow(store_url, timeout=THREE_WEEKS).run({})
    assert run.status == "paused"
    assert _new_threads(baseline) == set()  # threads may end, none may start
    assert not any(isinstance(t, threading.Timer) for t in threading.enumerate())

    async def pause_from_async() -> tuple[str, set[asyncio.Task[Any]], list[float]]:
        paused = await gated_flow(store_url, "async-deadlines", timeout=THREE_WEEKS).arun({})
        await asyncio.sleep(0)  # let cancelled helpers finish
        loop = asyncio.get_running_loop()
        others = asyncio.all_tasks(loop) - {asyncio.current_task(loop)}
        return paused.status, others, _pending_timers(loop)

    status, tasks, timers = asyncio.run(pause_from_async())
    assert status == "paused"
    assert tasks == set()
    assert all(delay < 60 for delay in timers), f"a timer waits {max(timers):.0f} s: someone waits for the deadline"
    assert _new_threads(baseline) == set()


def test_three_week_gate_survives_closing_everything(store_url: str) -> None:
    """A paused run with a 3-week gate needs no live object; a new store applies its deadline."""
    calls = Calls()
    run = gated_flow(store_url, timeout=THREE_WEEKS, calls=calls).run({})
    old_store = store_of(store_url)
    run_sync(old_store.close())
    new_store = dnb.connect(store_url)
    assert new_store is not old_store

    # Before the deadline a fresh look changes nothing.
    reopened = dnb.get_run(run.id, store=new_store)
    assert reopened.status == "paused"
    assert reopened.pending_interrupt is not None
    assert reopened.pending_interrupt["context"] == {"draft": "Quarterly report"}
    [row] = run_sync(new_store.pending_interrupts(run.id))
    assert row.expires_at - row.created_at == pytest.approx(THREE_WEEKS, abs=1e-6)

    let_time_pass(store_url, run.id, THREE_WEEKS + 5)
    fresh_flow = gated_flow(store_url, timeout=THREE_WEEKS, calls=calls)  # as a new process would define it
    looked = dnb.get_run(run.id, store=new_store)
    assert looked.status == "pending"
    done = fresh_flow.resume(run.id)
    assert done.status == "completed"
    assert done.state["approved"] is False
    assert done.state["by"] == TIMEOUT_BY
    assert [d["by"] for d in decisions(store_url, run.id)] == [TIMEOUT_BY]


CHILD = """\
import sys

import durable_nb as dnb

flow = dnb.Workflow("deadlines", store=sys.argv[1])


@flow.node(retry_count=0)
def prepare(state):
    return {{"draft": "Quarterly report"}}


@flow.node(after="prepare", retry_count=0)
def review(state):
    d = dnb.gate("publish?", {{"draft": state["draft"]}}, timeout_seconds={timeout}, on_timeout="reject")
    return {{"approved": d.approved, "comment": d.comment, "by": d.by}}


@flow.node(after="review", retry_count=0)
def publish(state):
    return {{"published": state["approved"]}}


run = flow.run({{}})
print(run.id, run.status, flush=True)
"""


def test_the_process_that_paused_the_run_exits_at_once(store_url: str, tmp_path: Path) -> None:
    """No process has to stay for a gate's deadline; another process applies it when it looks."""
    script = tmp_path / "pause_and_exit.py"
    script.write_text(textwrap.dedent(CHILD.format(timeout=THREE_WEEKS)))
    child = subprocess.run(
        [sys.executable, str(script), store_url],
        capture_output=True,
        text=True,
        timeout=60,
        env=env_with_repo(),
    )
    assert child.returncode == 0, child.stderr
    run_id, status = child.stdout.split()
    assert status == "paused"

    assert dnb.get_run(run_id, store=store_url).status == "paused"
    let_time_pass(store_url, run_id, THREE_WEEKS + 5)
    report = dnb.recover([gated_flow(store_url)], store=store_url)
    assert report.expired_gates == [f"{run_id}:review"]
    done = dnb.get_run(run_id, store=store_url)
    assert done.status == "completed"
    assert done.state["by"] == TIMEOUT_BY


# -- 7. concurrent appliers ------------------------------------------------------------------


def look_at_once(store_url: str, run_id: str, lookers: int, separate: bool) -> tuple[list[str], list[BaseException]]:
    """Start ``lookers`` threads that call get_run on one run at the same instant; return what they saw."""
    barrier = threading.Barrier(lookers)
    seen: list[str] = []
    errors: list[BaseException] = []

    def look() -> None:
        store: Any = new_store(store_url) if separate else store_url
        try:
            barrier.wait(timeout=10)
            seen.append(dnb.get_run(run_id, store=store).status)
        except BaseException as exc:  # noqa: BLE001 - reported by the caller's assertion
            errors.append(exc)
        finally:
            if separate:
                run_sync(store.close())

    threads = [threading.Thread(target=look) for _ in range(lookers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads), "a looker hangs"
    return seen, errors


@pytest.mark.parametrize("stores", ["shared", "separate"])
@pytest.mark.parametrize("on_timeout", ["reject", "fail"])
def test_concurrent_lookers_apply_the_deadline_once(store_url: str, stores: str, on_timeout: str) -> None:
    """Four threads looking at an expired run at once record exactly one outcome.

    ``separate`` gives each thread its own store object and SQLite connection, as separate
    processes would have; ``shared`` uses the process's one store from four event loops.
    """
    flow = gated_flow(store_url, timeout=THREE_WEEKS, on_timeout=on_timeout)
    expected = "pending" if on_timeout == "reject" else "failed"
    outcome = "approved:review" if on_timeout == "reject" else "failed:review"
    for _ in range(5):
        run = flow.run({})
        let_time_pass(store_url, run.id, THREE_WEEKS + 5)
        seen, errors = look_at_once(store_url, run.id, 4, separate=stores == "separate")
        assert errors == []
        assert len(seen) == 4
        # Every looker sees the applied outcome, also one overtaken between its two reads.
        assert set(seen) == {expected}
        assert dnb.get_run(run.id, store=store_url).status == expected
        all_steps = steps(store_url, run.id)
        assert all_steps.count(outcome) == 1
        assert all_steps.count("approved:review") + all_steps.count("failed:review") == 1
        assert all_steps.count("run_end") == (1 if on_timeout == "fail" else 0)
        assert event_types(store_url, run.id).count("gate_decided") == 1
        assert len(decisions(store_url, run.id)) == (1 if on_timeout == "reject" else 0)


# -- regressions: bugs these tests found, now fixed --------------------------------------------


def test_a_weeks_long_timeout_reads_in_days(store_url: str) -> None:
    """The timeout note says how long the gate waited in words a person reads at a glance."""
    run = gated_flow(store_url, timeout=THREE_WEEKS).run({})
    let_time_pass(store_url, run.id, THREE_WEEKS + 5)
    dnb.get_run(run.id, store=store_url)
    [decision] = decisions(store_url, run.id)
    assert "e+" not in decision["comment"]
    assert "1814400" in decision["comment"] or "21 days" in decision["comment"]


def test_fail_on_expiry_leaves_no_suspended_node_in_status(store_url: str) -> None:
    """A run failed by a gate timeout waits at no gate, so no node counts as suspended."""
    flow = dnb.Workflow("two-gates", store=store_url)

    @flow.node(retry_count=0)
    def legal(state):
        return {"legal": dnb.gate("legal", timeout_seconds=THREE_WEEKS, on_timeout="fail").approved}

    @flow.node(retry_count=0)
    def finance(state):
        return {"finance": dnb.gate("finance").approved}

    run = flow.run({})
    assert len(run.pending_interrupts) == 2
    let_time_pass(store_url, run.id, THREE_WEEKS + 5)
    looked = dnb.get_run(run.id, store=store_url)
    assert looked.status == "failed"
    assert pending_rows(store_url, run.id) == []  # both gates were released
    status = dnb.status(run.id, store=store_url)
    assert status["node_counts"]["suspended"] == 0


class OvertakenStore(SQLiteStore):
    """A store whose first read of a run row is overtaken: another looker (the process's shared
    store, on its own thread and connection) applies the expired deadline right after it."""

    overtaken = False

    async def get_run(self, run_id: str) -> Any:
        record = await super().get_run(run_id)
        if not self.overtaken:
            self.overtaken = True
            await asyncio.to_thread(dnb.get_run, run_id, store=self.url)
        return record


@pytest.mark.sqlite_only
@pytest.mark.parametrize("look", ["dnb.get_run", "dnb.status", "flow.status", "flow.resume"])
@pytest.mark.parametrize("on_timeout", ["reject", "fail"])
def test_an_overtaken_looker_sees_the_applied_deadline(store_url: str, look: str, on_timeout: str) -> None:
    """A looker that finds the deadline already applied by someone else reports the applied outcome."""
    run = gated_flow(store_url, timeout=THREE_WEEKS, on_timeout=on_timeout).run({})
    let_time_pass(store_url, run.id, THREE_WEEKS + 5)
    store = OvertakenStore(store_url, db_path(store_url))
    expected = "pending" if on_timeout == "reject" else "failed"
    try:
        if look == "dnb.get_run":
            assert dnb.get_run(run.id, store=store).status == expected
        elif look == "dnb.status":
            assert dnb.status(run.id, store=store)["status"] == expected
        elif look == "flow.status":
            assert gated_flow(store, timeout=THREE_WEEKS, on_timeout=on_timeout).status(run.id)["status"] == expected
        else:
            resumed = gated_flow(store, timeout=THREE_WEEKS, on_timeout=on_timeout).resume(run.id)
            assert resumed.status == ("completed" if on_timeout == "reject" else "paused")
    finally:
        run_sync(store.close())
