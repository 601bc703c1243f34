"""One engine call per user action, counted in store round trips (not timed).

The store is real; a thin wrapper only counts the calls that reach it.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from conftest import new_store
from IPython.core.interactiveshell import InteractiveShell

import durable_nb as dnb
from durable_nb._loop import run_sync
from durable_nb.engine.decisions import decide, make_decision
from durable_nb.notebook.session import session_for


class CountingStore:
    """A real store that records the name of every call made to it."""

    def __init__(self, inner: dnb.Store) -> None:
        self._inner = inner
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if not inspect.iscoroutinefunction(value):
            return value

        @functools.wraps(value)
        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return await value(*args, **kwargs)

        return counted


def paused_workflow(store_url: str) -> tuple[dnb.Workflow, str]:
    flow = dnb.Workflow("counted", store=store_url)

    @flow.node()
    def draft(state: dict[str, Any]) -> dict[str, Any]:
        return {"text": "hello"}

    @flow.node(after="draft")
    def review(state: dict[str, Any]) -> dict[str, Any]:
        return {"approved": dnb.gate("ship?").approved}

    run = flow.run({})
    assert run.status == "paused"
    return flow, run.id


def test_a_decision_is_three_round_trips(store_url: str) -> None:
    """Issue 14: deciding a gate reads the open gates and the head once, then claims and writes in one commit."""
    _, run_id = paused_workflow(store_url)
    counting = CountingStore(new_store(store_url))
    result = run_sync(decide(counting, run_id, make_decision(True, comment="ok", by="ana")))  # type: ignore[arg-type]
    assert counting.calls == ["pending_interrupts", "resume_point", "commit"]
    assert result.run.status == "pending" and result.checkpoints[-1].step == "approved:review"
    assert result.checkpoints[-1].decision["by"] == "ana"  # what was written comes back: nobody reads it again


def test_a_gate_claimed_by_its_checkpoint_is_decided_once(store_url: str) -> None:
    """A decision naming the gate's checkpoint decides that gate; after it, the same claim finds nothing."""
    _, run_id = paused_workflow(store_url)
    store = new_store(store_url)
    gate = run_sync(store.pending_interrupts(run_id))[0].checkpoint_id
    run_sync(decide(store, run_id, make_decision(True), "review", gate=gate))
    try:
        run_sync(decide(store, run_id, make_decision(False), "review", gate=gate))
    except dnb.AlreadyResumed as error:
        assert run_id in str(error)
    else:
        raise AssertionError("a second decision of the same gate was recorded")


def _kernel(store_url: str) -> tuple[InteractiveShell, CountingStore]:
    shell = InteractiveShell()
    shell.run_line_magic("load_ext", "durable_nb")
    assert shell.run_cell("import durable_nb as dnb").success
    assert shell.run_cell(f"%durable run counted-notebook --store {store_url}").success
    session = session_for(shell)
    counting = CountingStore(session.store)  # type: ignore[arg-type]
    assert session.cell_run is not None
    session.store = counting  # type: ignore[assignment]
    session.cell_run.store = counting  # type: ignore[assignment]
    session.cell_run.values.store = counting  # type: ignore[assignment]
    return shell, counting


def test_a_cell_commit_is_three_round_trips(store_url: str) -> None:
    """Issue 14: a new %%durable cell reads the run and its own commit once, then commits once."""
    shell, counting = _kernel(store_url)
    assert shell.run_cell("%%durable first\nx = 1").success
    counting.calls.clear()
    assert shell.run_cell("%%durable second\ny = x + 1").success
    assert counting.calls == ["get_run", "node_checkpoint", "commit"]
    assert shell.user_ns["y"] == 2


def test_a_click_decides_with_three_round_trips_and_continues(store_url: str) -> None:
    """Issue 14: the Approve button claims the gate in three round trips and the cell continues without
    re-reading the decision or the run."""
    shell, counting = _kernel(store_url)
    session = session_for(shell)
    panels: list[Any] = []
    shown = session.show_gate

    def keep(*args: Any) -> None:
        panels.append(session.gate_panel(*args))
        shown(*args)

    session.show_gate = keep  # type: ignore[method-assign]
    result = shell.run_cell("%%durable review\nd = dnb.gate('ship?')\nshipped = d.approved")
    assert type(result.error_in_exec).__name__ == "GatePending"
    [panel] = panels
    counting.calls.clear()
    panel.approve_button.click()
    assert shell.user_ns["shipped"] is True, panel.status.value
    decision, continuation = counting.calls[:3], counting.calls[3:]
    assert decision == ["pending_interrupts", "resume_point", "commit"]
    # The gate's recorded source, taking the run back, and the cell's commit.
    assert continuation == ["get_checkpoint", "commit", "commit"]
