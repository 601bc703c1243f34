"""The README's workflow example (The workflow API) end to end: paused, approved, completed."""

from __future__ import annotations

import pytest
from conftest import stated

import durable_nb as dnb


def build(store_url: str, calls: list[str]) -> dnb.Workflow:
    flow = dnb.Workflow("support-triage", store=store_url)

    @flow.node()
    def classify(state):
        calls.append("classify")
        return {"category": "billing"}

    @flow.node(after="classify", retry_count=3, timeout_seconds=30)
    def draft(state):
        calls.append("draft")
        return {"draft_reply": f"About your {state['category']} question: refunded."}

    @flow.node(after="draft")
    def review(state):
        calls.append("review")
        d = dnb.gate("approve_reply", context={"draft": state["draft_reply"]})
        return {"approved": d.approved, "reviewer_comment": d.comment}

    return flow


def test_paused_then_approved_then_completed(store_url: str) -> None:
    """The gate pauses the run with its frozen context; approving continues it to the end."""
    calls: list[str] = []
    flow = build(store_url, calls)

    run = flow.run({"ticket": "Charged twice"}, idempotency_key="ticket-8841")
    assert run.status == "paused"
    assert run.pending_interrupt == {
        "reason": "approve_reply",
        "context": {"draft": "About your billing question: refunded."},
        "node_id": "review",
        "agent_path": None,
    }
    assert calls == ["classify", "draft", "review"]

    run = flow.approve(run.id, approved=True, comment="ok", by="alice")
    assert run.status == "completed"
    assert run.error is None
    assert run.pending_interrupt is None
    assert run.state == {
        "ticket": "Charged twice",
        "category": "billing",
        "draft_reply": "About your billing question: refunded.",
        "approved": True,
        "reviewer_comment": "ok",
    }
    # The gated node re-ran from its top; nothing before it ran again.
    assert calls == ["classify", "draft", "review", "review"]

    steps = list(dnb.history(run.id, store=store_url)["step"])
    assert steps == [
        "after:classify",
        "after:draft",
        "gate:review",
        "approved:review",
        "after:review",
        "run_end",
    ]


def test_checkpoint_state_grows_node_by_node(store_url: str) -> None:
    """Each after:<node> checkpoint's state includes that node's committed updates."""
    flow = build(store_url, [])
    run = flow.run({"ticket": "t"})
    store = dnb.connect(store_url)

    by_step = {c.step: c for c in stated(store, run.id)}
    assert set(by_step["after:classify"].manifest) == {"ticket", "category"}
    assert set(by_step["after:draft"].manifest) == {"ticket", "category", "draft_reply"}
    assert by_step["after:classify"].completed == ["classify"]
    assert by_step["after:classify"].queue == ["draft"]
    assert by_step["gate:review"].status.value == "interrupted"
    assert by_step["gate:review"].interrupt["context"] == {"draft": run.pending_interrupt["context"]["draft"]}


def test_run_repr_and_html(store_url: str) -> None:
    """A Run has its fields, a text repr and an HTML repr for notebooks."""
    flow = build(store_url, [])
    run = flow.run({"ticket": "t"})
    assert {
        "id",
        "name",
        "status",
        "error",
        "state",
        "pending_interrupt",
        "parent_run_id",
        "parent_checkpoint_id",
    } <= set(dir(run))
    assert "paused" in repr(run) and run.id in repr(run)
    page = run._repr_html_()
    assert "approve_reply" in page and "paused" in page and run.id in page


def test_idempotency_key_returns_original_run(store_url: str) -> None:
    """A repeated idempotency key returns the original run, never a second one; the same key with
    other input is refused (IdempotencyKeyReused) and starts nothing."""
    calls: list[str] = []
    flow = build(store_url, calls)
    first = flow.run({"ticket": "a"}, idempotency_key="ticket-1")
    again = flow.run({"ticket": "a"}, idempotency_key="ticket-1")
    assert again.id == first.id
    assert again.state["ticket"] == "a"
    with pytest.raises(dnb.IdempotencyKeyReused):
        flow.run({"ticket": "different"}, idempotency_key="ticket-1")
    assert calls == ["classify", "draft", "review"]
    assert len(dnb.runs(store=store_url)) == 1
    other = flow.run({"ticket": "b"}, idempotency_key="ticket-2")
    assert other.id != first.id
