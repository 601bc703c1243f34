"""Idempotency keys: a repeated key returns the first run; the key sent again with other input
is refused with IdempotencyKeyReused, as payment APIs do, and nothing is started or stored."""

from __future__ import annotations

from typing import Any

import pytest

import durable_nb as dnb

FIRST = {"ticket": 4812, "customer": {"name": "Ana", "tier": 1}}


def _flow(store_url: str) -> dnb.Workflow:
    flow = dnb.Workflow("keyed", store=store_url)

    @flow.node()
    def review(state):
        return {"ok": dnb.gate("refund?", {"ticket": state["ticket"]}).approved}

    return flow


def test_the_same_input_returns_the_first_run(store_url: str) -> None:
    """The same input, its dicts in another order, returns the first run (run and start alike)."""
    flow = _flow(store_url)
    first = flow.run(FIRST, idempotency_key="ticket-4812")
    reordered = {"customer": {"tier": 1, "name": "Ana"}, "ticket": 4812}
    assert flow.run(reordered, idempotency_key="ticket-4812").id == first.id
    assert flow.start(dict(FIRST), idempotency_key="ticket-4812").id == first.id
    assert len(dnb.runs("keyed", store=store_url)) == 1


@pytest.mark.parametrize(
    "other",
    [
        pytest.param({"ticket": 4813, "customer": {"name": "Ana", "tier": 1}}, id="another-value"),
        pytest.param({"ticket": 4812.0, "customer": {"name": "Ana", "tier": 1}}, id="int-as-float"),
        pytest.param({"ticket": 4812, "customer": {"name": "Ana", "tier": True}}, id="int-as-bool"),
        pytest.param({"ticket": 4812}, id="a-name-less"),
        pytest.param({**FIRST, "note": None}, id="a-name-more"),
        pytest.param({}, id="no-input"),
        pytest.param({"ticket": 4812, "customer": {1, 2}}, id="pickled-value"),
    ],
)
def test_the_key_with_other_input_is_refused(store_url: str, other: dict[str, Any]) -> None:
    """Other input under a used key raises IdempotencyKeyReused naming the key and the first run;
    no run is started, and the first run is untouched."""
    flow = _flow(store_url)
    first = flow.run(FIRST, idempotency_key="ticket-4812")
    steps = dnb.history(first.id, store=store_url)["step"].tolist()
    for call in (flow.run, flow.start):
        with pytest.raises(dnb.IdempotencyKeyReused) as refused:
            call(other, idempotency_key="ticket-4812")
        assert "'ticket-4812'" in str(refused.value) and first.id in str(refused.value)
        assert "new key" in str(refused.value)
    assert dnb.runs("keyed", store=store_url)["run_id"].tolist() == [first.id]
    assert dnb.history(first.id, store=store_url)["step"].tolist() == steps
    assert dnb.get_run(first.id, store=store_url).state == FIRST


def test_a_key_belongs_to_one_workflow(store_url: str) -> None:
    """The same key in another workflow is another request: it starts that workflow's run."""
    first = _flow(store_url).run(FIRST, idempotency_key="k")
    other = dnb.Workflow("other", store=store_url)

    @other.node()
    def step(state):
        return {}

    assert other.run({"x": 1}, idempotency_key="k").id != first.id


def test_a_pickled_input_sent_again_returns_the_first_run(store_url: str) -> None:
    """An input stored as a pickle (a set) compares by value: sending it again finds the first run."""
    flow = _flow(store_url)
    first = flow.start({"ticket": 1, "tags": {"b", "a"}}, idempotency_key="tags")
    assert flow.start({"ticket": 1, "tags": {"a", "b"}}, idempotency_key="tags").id == first.id
