"""One engine call per user action, counted in store round trips (not timed).

The store is real; a thin wrapper only counts the calls that reach it.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
import string
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import new_store, on_the_kernel_lease_thread
from IPython.core.interactiveshell import InteractiveShell

import durable_nb as dnb
import durable_nb.notebook
from durable_nb._loop import run_sync
from durable_nb.engine.gates.decisions import decide, make_decision
from durable_nb.notebook.session import session_for


class CountingStore:
    """A real store that records the name of every call made to it, except the lease thread's."""

    def __init__(self, inner: dnb.Store) -> None:
        self._inner = inner
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if not inspect.iscoroutinefunction(value):
            return value

        @functools.wraps(value)
        def counted(*args: Any, **kwargs: Any) -> Any:
            # Recorded when called, on the caller's thread, so a renewal of the lease is told apart.
            if not on_the_kernel_lease_thread():
                self.calls.append(name)
            return value(*args, **kwargs)

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


class Hops:
    """Counts the notebook layer's sync-to-async calls, by module: ``run_sync`` (a hand-off to the
    background loop) as the module's name, ``run_in_place`` (on the calling thread) as ``name:here``.
    The thread that keeps the kernel's lease wakes when it will and is not counted."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def wrap(self, module: Any, driver_name: str, suffix: str) -> Any:
        driver = getattr(module, driver_name)

        def counted(coro: Any) -> Any:
            if not on_the_kernel_lease_thread():
                self.calls.append(module.__name__.rsplit(".", 1)[-1] + suffix)
            return driver(coro)

        return counted


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> Iterator[Hops]:
    """Count every call of ``run_sync`` and ``run_in_place`` made from the notebook layer and the gate panel."""
    counter = Hops()
    names = [f"durable_nb.notebook.{m.name}" for m in pkgutil.iter_modules(durable_nb.notebook.__path__)]
    for name in [*names, "durable_nb.widgets.gate_panel"]:
        module = importlib.import_module(name)
        for driver_name, suffix in (("run_sync", ""), ("run_in_place", ":here")):
            if hasattr(module, driver_name):
                monkeypatch.setattr(module, driver_name, counter.wrap(module, driver_name, suffix))
    yield counter


def _kernel(store_url: str, name: str = "counted-notebook") -> tuple[InteractiveShell, CountingStore]:
    shell = InteractiveShell()
    shell.run_line_magic("load_ext", "durable_nb")
    assert shell.run_cell("import durable_nb as dnb").success
    assert shell.run_cell(f"%durable run {name} --store {store_url}").success
    session = session_for(shell)
    counting = CountingStore(session.store)  # type: ignore[arg-type]
    assert session.cell_run is not None
    session.store = counting  # type: ignore[assignment]
    session.cell_run.store = counting  # type: ignore[assignment]
    session.cell_run.writer.store = counting  # type: ignore[assignment]
    session.cell_run.lineage.store = counting  # type: ignore[assignment]
    session.cell_run.values.store = counting  # type: ignore[assignment]
    return shell, counting


def _gated(shell: InteractiveShell, cell: str) -> list[Any]:
    """Run a cell that pauses at a gate; return the panels it showed."""
    session = session_for(shell)
    panels: list[Any] = []

    def keep(*args: Any) -> None:
        panels.append(session.gate_panel(*args))

    session.show_gate = keep  # type: ignore[method-assign]
    assert type(shell.run_cell(cell).error_in_exec).__name__ == "GatePending"
    return panels


@pytest.fixture
def marker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let cells set a module attribute (a setting a restore re-applies), undone after the test."""
    monkeypatch.setattr(string, "durable_nb_counted", None, raising=False)


def test_a_new_cell_is_two_round_trips_on_the_kernels_thread(store_url: str, hops: Hops, marker: None) -> None:
    """A new %%durable cell asks the engine once what to do (one read: the run row) and commits
    its values, settings and shown value with one more call, both on the kernel's own thread."""
    shell, counting = _kernel(store_url)
    assert shell.run_cell("%%durable first\nx = 1").success
    counting.calls.clear()
    hops.calls.clear()
    assert shell.run_cell("%%durable second\nimport string\nstring.durable_nb_counted = 3\ny = x + 1\ny * 2").success
    assert counting.calls == ["get_run", "commit"]
    assert hops.calls == ["session:here", "executing:here"]
    assert shell.user_ns["y"] == 2


def test_a_restore_in_a_new_kernel_is_two_round_trips(store_url: str, hops: Hops, marker: None) -> None:
    """Restoring a committed cell in a new kernel finds its commit and reads its values, outputs,
    settings and shown value at once."""
    cell = "%%durable first\nimport string\nstring.durable_nb_counted = 6\nx = [1, 2]\nprint(x)\nx + [3]"
    shell, _ = _kernel(store_url)
    assert shell.run_cell(cell).success
    run_sync(session_for(shell).require().release())
    fresh, counting = _kernel(store_url)
    string.durable_nb_counted = None  # type: ignore[attr-defined]  # as in a new process: the restore sets it
    counting.calls.clear()
    hops.calls.clear()
    result = fresh.run_cell(cell)
    assert result.success and result.result == [1, 2, 3]
    assert counting.calls == ["node_checkpoint", "get_blobs"]
    assert hops.calls == ["session:here"]
    assert fresh.user_ns["x"] == [1, 2]
    assert string.durable_nb_counted == 6  # type: ignore[attr-defined]


def test_a_click_decides_with_four_round_trips_and_continues(store_url: str, hops: Hops) -> None:
    """The Approve button claims the gate and hands the run to this kernel in one commit; the cell
    continues from the code the decision carries, and its commit is the fourth round trip."""
    shell, counting = _kernel(store_url)
    [panel] = _gated(shell, "%%durable review\nd = dnb.gate('ship?')\nshipped = d.approved")
    counting.calls.clear()
    hops.calls.clear()
    panel.approve_button.click()
    assert shell.user_ns["shipped"] is True, panel.status.value
    assert counting.calls == ["pending_interrupts", "resume_point", "commit", "commit"]
    assert hops.calls == ["gate_panel", "session", "executing:here"]
    history = dnb.history(session_for(shell).require().run_id, store=store_url)
    assert list(history["step"])[-2:] == ["approved:review", "after:review"]


def test_an_approval_after_a_restart_continues_in_the_new_kernel(store_url: str) -> None:
    """A kernel started after the pause shows the gate again; its panel hands the run to it and
    continues the cell with the code the gate was opened with, in four round trips as well."""
    cell = "%%durable review\nd = dnb.gate('ship?')\nok = d.approved"
    shell, _ = _kernel(store_url, "restarted")
    _gated(shell, cell)
    run_sync(session_for(shell).require().release())
    fresh, counting = _kernel(store_url, "restarted")
    [panel] = _gated(fresh, cell)
    counting.calls.clear()
    panel.approve_button.click()
    assert fresh.user_ns["ok"] is True, panel.status.value
    assert counting.calls == ["pending_interrupts", "resume_point", "commit", "commit"]
