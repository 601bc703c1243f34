"""Workflows several test files share."""

from __future__ import annotations

import durable_nb as dnb


def pricing(store_url: str) -> dnb.Workflow:
    """load -> discount (by state['rate']) -> total."""
    flow = dnb.Workflow("pricing", store=store_url)

    @flow.node()
    def load(state):
        return {"prices": [10.0, 20.0, 30.0], "count": 3}

    @flow.node(after="load")
    def discount(state):
        return {"discounted": [p * (1 - state["rate"]) for p in state["prices"]]}

    @flow.node(after="discount")
    def total(state):
        return {"total": round(sum(state["discounted"]), 2)}

    return flow
