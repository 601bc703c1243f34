"""@idempotent: once per run and arguments, sync and async; runs normally elsewhere."""

from __future__ import annotations

import asyncio
from collections import Counter

import durable_nb as dnb

sent: Counter[str] = Counter()


@dnb.idempotent
def send_email(to: str, subject: str) -> str:
    sent[to] += 1
    return f"message-id-{to}-{sent[to]}"


@dnb.idempotent
async def charge(account: str, cents: int) -> dict[str, object]:
    sent[f"charge:{account}"] += 1
    await asyncio.sleep(0)
    return {"account": account, "cents": cents, "receipt": sent[f"charge:{account}"]}


@dnb.idempotent(key=lambda order, **_: order["id"])
def ship(order: dict[str, object], carrier: str = "ups") -> str:
    sent[f"ship:{order['id']}"] += 1
    return f"shipped {order['id']} via {carrier}"


def make_flow(store_url: str) -> dnb.Workflow:
    flow = dnb.Workflow("notify", store=store_url)

    @flow.node()
    def notify(state):
        first = send_email("ann@example.com", "Hi")
        second = send_email("ann@example.com", "Hi")  # same run, same args: stored value
        other = send_email("bob@example.com", "Hi")
        return {"ids": [first, second, other]}

    @flow.node(after="notify")
    async def bill(state):
        receipt = await charge("acct-1", 500)
        again = await charge("acct-1", 500)
        return {"receipts": [receipt["receipt"], again["receipt"]]}

    @flow.node(after="bill")
    def gate_then_ship(state):
        shipped = ship({"id": 7, "items": 3})
        shipped_again = ship({"id": 7, "items": 4}, carrier="dhl")  # same key: stored value
        decision = dnb.gate("release?")
        return {"shipped": [shipped, shipped_again], "released": decision.approved}

    return flow


def test_same_run_runs_body_once(store_url: str) -> None:
    """Within one run a repeated call returns the stored value; the body never runs again."""
    sent.clear()
    flow = make_flow(store_url)
    run = flow.run({})
    assert run.status == "paused"
    assert sent == Counter({"ann@example.com": 1, "bob@example.com": 1, "charge:acct-1": 1, "ship:7": 1})
    assert run.state["ids"] == ["message-id-ann@example.com-1"] * 2 + ["message-id-bob@example.com-1"]
    assert run.state["receipts"] == [1, 1]

    # The gated node re-runs from its top after approval: its idempotent call is not repeated.
    done = flow.approve(run.id)
    assert done.status == "completed"
    assert sent["ship:7"] == 1
    assert done.state["shipped"] == ["shipped 7 via ups", "shipped 7 via ups"]


def test_other_run_runs_body_again(store_url: str) -> None:
    """Another run executes the body again."""
    sent.clear()
    flow = make_flow(store_url)
    flow.run({})
    flow.run({})
    assert sent["ann@example.com"] == 2
    assert sent["charge:acct-1"] == 2


def test_outside_any_run_runs_normally() -> None:
    """Outside a durable node the function just runs, every time."""
    sent.clear()
    assert send_email("cy@example.com", "x") == "message-id-cy@example.com-1"
    assert send_email("cy@example.com", "x") == "message-id-cy@example.com-2"
    assert asyncio.run(charge("a", 1))["receipt"] == 1
    assert asyncio.run(charge("a", 1))["receipt"] == 2


def test_resume_after_failure_replays_finished_calls(store_url: str) -> None:
    """Calls that finished before a node failed are not repeated when the node re-runs."""
    sent.clear()
    flow = dnb.Workflow("partial", store=store_url)
    state = {"fail": True}

    @flow.node(retry_count=0)
    def batch(s):
        results = [send_email(f"user{i}@example.com", "news") for i in range(5)]
        if state["fail"]:
            raise RuntimeError("SMTP quota hit after 5 mails")
        results.append(send_email("user5@example.com", "news"))
        return {"results": results}

    run = flow.run({})
    assert run.status == "failed"
    assert sum(sent.values()) == 5
    state["fail"] = False
    assert flow.resume(run.id).status == "completed"
    assert sum(sent.values()) == 6
    assert all(count == 1 for count in sent.values())


def test_wraps_keep_name() -> None:
    """@idempotent keeps the wrapped function's name and docstring."""
    assert send_email.__name__ == "send_email"
    assert asyncio.iscoroutinefunction(charge)
