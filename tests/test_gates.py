"""Gates and interrupts: pause, decide once, re-run from the top; gate timeouts are checked up front."""

from __future__ import annotations

from datetime import datetime

import pytest

import durable_nb as dnb
from durable_nb._loop import run_sync


def test_gate_outside_a_node_raises() -> None:
    """gate() outside a durable node says where to call it."""
    with pytest.raises(dnb.NoActiveNode, match="inside a Workflow node"):
        dnb.gate("approve")


def test_rejection_reaches_the_node(store_url: str) -> None:
    """A rejection is a decision too; gate() returns approved=False with the comment."""
    flow = dnb.Workflow("reject", store=store_url)

    @flow.node()
    def review(state):
        decision = dnb.gate("publish?", {"title": state["title"]})
        return {"published": decision.approved, "why": decision.comment, "by": decision.by}

    run = flow.run({"title": "Q3 report"})
    done = flow.reject(run.id, comment="numbers are stale", by="dana")
    assert done.status == "completed"
    assert done.state["published"] is False
    assert done.state["why"] == "numbers are stale"
    assert done.state["by"] == "dana"


def test_decision_fields_are_recorded(store_url: str) -> None:
    """approved:<node> records approved, value, comment, by and at."""
    flow = dnb.Workflow("fields", store=store_url)
    seen: list[dnb.Decision] = []

    @flow.node()
    def review(state):
        decision = dnb.gate("budget")
        seen.append(decision)
        return {"limit": decision.value}

    run = flow.run({})
    flow.approve(run.id, value={"limit": 500}, comment="ok up to 500", by="erin")
    assert seen[0].approved is True
    assert seen[0].value == {"limit": 500}
    assert isinstance(seen[0].at, datetime)
    approved = [c for c in run_sync(dnb.connect(store_url).list_checkpoints(run.id)) if c.step == "approved:review"]
    assert len(approved) == 1
    assert approved[0].decision["by"] == "erin"
    assert approved[0].decision["comment"] == "ok up to 500"
    assert approved[0].decision["value"] == {"limit": 500}


def test_two_gates_in_one_node(store_url: str) -> None:
    """A node with two gates pauses twice; each re-run replays earlier decisions in order."""
    flow = dnb.Workflow("two-gates", store=store_url)
    runs_of_node: list[int] = []

    @flow.node()
    def approvals(state):
        runs_of_node.append(1)
        legal = dnb.gate("legal")
        finance = dnb.gate("finance")
        return {"legal": legal.comment, "finance": finance.comment}

    run = flow.run({})
    assert run.pending_interrupt["reason"] == "legal"
    run = flow.approve(run.id, comment="legal ok")
    assert run.status == "paused"
    assert run.pending_interrupt["reason"] == "finance"
    run = flow.approve(run.id, comment="finance ok")
    assert run.status == "completed"
    assert run.state == {"legal": "legal ok", "finance": "finance ok"}
    assert len(runs_of_node) == 3


def test_context_is_frozen_at_suspend_time(store_url: str) -> None:
    """The context is frozen as JSON when the run pauses; non-JSON values become their repr."""
    flow = dnb.Workflow("frozen", store=store_url)
    shared = {"items": [1, 2]}

    class Money:
        def __repr__(self) -> str:
            return "Money(12.50 EUR)"

    @flow.node()
    def review(state):
        dnb.gate("check", {"shared": shared, "amount": Money(), "nan": float("nan")})
        return {}

    run = flow.run({})
    shared["items"].append(3)
    stored = dnb.get_run(run.id, store=store_url).pending_interrupt
    assert stored["context"] != {"shared": {"items": [1, 2, 3]}}
    assert "Money" in str(stored["context"])


def test_gate_timeout_floor_is_one_second(store_url: str) -> None:
    """A gate timeout below 1 second is refused with a message; at 1 second it is accepted."""
    flow = dnb.Workflow("timeouts", store=store_url)

    @flow.node(retry_count=0)
    def too_short(state):
        dnb.gate("quick", timeout_seconds=0.5)
        return {}

    run = flow.run({})
    assert run.status == "failed"
    assert "1 second floor" in (run.error or "")

    flow2 = dnb.Workflow("timeouts-ok", store=store_url)

    @flow2.node()
    def long_wait(state):
        dnb.gate("weeks", timeout_seconds=60 * 60 * 24 * 21, on_timeout="fail")
        return {}

    paused = flow2.run({})
    assert paused.status == "paused"
    pending = run_sync(dnb.connect(store_url).pending_interrupts(paused.id))
    assert pending[0].on_timeout == "fail"
    assert pending[0].expires_at - pending[0].created_at == pytest.approx(60 * 60 * 24 * 21)


def test_gate_pause_is_one_transaction(store_url: str) -> None:
    """The gate checkpoint, the pending row and the paused status are written together."""
    flow = dnb.Workflow("atomic", store=store_url)

    @flow.node()
    def review(state):
        dnb.gate("g")
        return {}

    run = flow.run({})
    store = dnb.connect(store_url)
    head = run_sync(store.head_checkpoint(run.id))
    pending = run_sync(store.pending_interrupts(run.id))
    record = run_sync(store.get_run(run.id))
    assert head.step == "gate:review"
    assert [p.checkpoint_id for p in pending] == [head.checkpoint_id]
    assert record.status.value == "paused"
    assert record.owner is None


def test_second_decision_is_already_resumed(store_url: str) -> None:
    """A decision is recorded once; a later one raises AlreadyResumed."""
    flow = dnb.Workflow("once", store=store_url)

    @flow.node()
    def review(state):
        return {"ok": dnb.gate("g").approved}

    run = flow.run({})
    dnb.approve(run.id, store=store_url)
    with pytest.raises(dnb.AlreadyResumed):
        dnb.reject(run.id, store=store_url)
    with pytest.raises(dnb.AlreadyResumed):
        flow.approve(run.id)
    assert flow.resume(run.id).state == {"ok": True}


def test_wave_with_two_gates_needs_node_named(store_url: str) -> None:
    """A wave may pause at two gates; a decision must name the node, and the run goes on after both."""
    flow = dnb.Workflow("parallel-gates", store=store_url)

    @flow.node()
    def legal(state):
        return {"legal": dnb.gate("legal").approved}

    @flow.node()
    def finance(state):
        return {"finance": dnb.gate("finance").approved}

    run = flow.run({})
    assert run.status == "paused"
    assert sorted(p["node_id"] for p in run.pending_interrupts) == ["finance", "legal"]
    with pytest.raises(dnb.InvalidDecision, match="node="):
        dnb.approve(run.id, store=store_url)
    run = flow.approve(run.id, node="legal")
    assert run.status == "paused"
    assert [p["node_id"] for p in run.pending_interrupts] == ["finance"]
    run = flow.reject(run.id, node="finance")
    assert run.status == "completed"
    assert run.state == {"legal": True, "finance": False}


def test_concurrent_decisions_on_two_gates_both_count(store_url: str) -> None:
    """Two gates of one run decided at the same moment: neither decision is lost."""
    import asyncio

    flow = dnb.Workflow("two-at-once", store=store_url)

    @flow.node(retry_count=0)
    def p(state):
        return {"p": dnb.gate("p_gate").comment}

    @flow.node(retry_count=0)
    def q(state):
        return {"q": dnb.gate("q_gate").comment}

    run = flow.run({})

    async def both() -> list[dnb.Run]:
        return await asyncio.gather(
            dnb.aapprove(run.id, node="p", comment="A", store=store_url),
            dnb.aapprove(run.id, node="q", comment="B", store=store_url),
        )

    # Each call answers the run as it reads it after its own decision: the later one sees it pending;
    # the earlier one sees it paused, or pending too if the other decision landed before it looked.
    statuses = [r.status for r in asyncio.run(both())]
    assert "pending" in statuses and set(statuses) <= {"paused", "pending"}, statuses
    assert dnb.get_run(run.id, store=store_url).status == "pending"
    done = flow.resume(run.id)
    assert done.status == "completed"
    assert done.state == {"p": "A", "q": "B"}


def _two_gates(store_url: str) -> tuple[dnb.Workflow, dnb.Run]:
    flow = dnb.Workflow("gates-and-a-plain-node", store=store_url)

    @flow.node()
    def draft(state):
        return {"draft": "hello"}

    @flow.node(after="draft")
    def legal(state):
        return {"legal": dnb.gate("legal ok?").approved}

    @flow.node(after="draft")
    def finance(state):
        return {"finance": dnb.gate("budget ok?").approved}

    return flow, flow.run({})


@pytest.mark.parametrize("node", ["draft", "nowhere"])
def test_deciding_a_node_without_a_waiting_gate_is_unknown_gate(store_url: str, node: str) -> None:
    """A decision naming a node that has no gate waiting (a plain node, or no node at all) raises
    UnknownGate naming the gates that wait, from every front end's library call; nothing is decided."""
    flow, run = _two_gates(store_url)
    before = dnb.history(run.id, store=store_url)["step"].tolist()
    calls = [
        lambda: dnb.approve(run.id, node=node, store=store_url),
        lambda: dnb.reject(run.id, node=node, store=store_url),
        lambda: flow.approve(run.id, node=node),
    ]
    for call in calls:
        with pytest.raises(dnb.UnknownGate) as refused:
            call()
        message = str(refused.value)
        assert f"no gate waiting at node {node!r}" in message
        assert "'finance' (asking 'budget ok?')" in message and "'legal' (asking 'legal ok?')" in message
    assert dnb.history(run.id, store=store_url)["step"].tolist() == before
    assert sorted(p["node_id"] for p in dnb.get_run(run.id, store=store_url).pending_interrupts) == [
        "finance",
        "legal",
    ]


def test_a_gate_decided_by_someone_else_is_already_resumed_not_unknown(store_url: str) -> None:
    """Deciding a gate that another decider won, while the run still waits at another gate, is the
    race's answer (AlreadyResumed), not UnknownGate: that node did have a gate."""
    flow, run = _two_gates(store_url)
    dnb.approve(run.id, node="legal", store=store_url)
    with pytest.raises(dnb.AlreadyResumed, match="'legal' was already decided") as lost:
        dnb.approve(run.id, node="legal", store=store_url)
    assert "'finance' (asking 'budget ok?')" in str(lost.value)
    assert flow.approve(run.id, node="finance").state == {"draft": "hello", "legal": True, "finance": True}
