"""Widgets: the gate panel and the fork inspector, driven without a browser.

Buttons are pressed with ``.click()`` and fields filled by setting ``.value``. Outside a kernel
ipywidgets' Output captures nothing, so an ``OutputProbe`` plays the front end's part: while
a callback is inside ``with output:``, what it prints or displays is recorded in that Output.
"""

from __future__ import annotations

import getpass
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import IPython.display
import ipywidgets as widgets
import pandas as pd
import pytest
from conftest import new_store
from flows import pricing
from IPython.core.interactiveshell import InteractiveShell

import durable_nb as dnb
from durable_nb._loop import run_sync
from durable_nb.engine.forks.literals import MAX_OVERRIDE_CHARS, parse_overrides
from durable_nb.notebook.session import KernelSession, session_for
from durable_nb.widgets import gate_panel as gate_panel_module
from durable_nb.widgets.gate_panel import GatePanel
from durable_nb.widgets.inspector import Inspector

ERROR_COLOUR = "#dc2626"


# -- the front end's part: what goes into Output widgets ---------------------------------------------


class _Sink:
    def __init__(self, append: Any) -> None:
        self.append = append

    def write(self, text: str) -> int:
        self.append(text)
        return len(text)

    def flush(self) -> None:
        pass


class OutputProbe:
    """Records text and displayed objects sent into an Output while a callback is inside it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.stack: list[tuple[widgets.Output, Any, Any]] = []
        self.displayed: dict[int, list[Any]] = {}
        probe = self
        original_display = IPython.display.display

        def enter(output: widgets.Output) -> widgets.Output:
            probe.stack.append((output, sys.stdout, sys.stderr))
            sys.stdout = _Sink(output.append_stdout)
            sys.stderr = _Sink(output.append_stderr)
            return output

        def leave(output: widgets.Output, *exc: Any) -> None:
            _, sys.stdout, sys.stderr = probe.stack.pop()

        def display(*objects: Any, **kwargs: Any) -> None:
            if not probe.stack:
                original_display(*objects, **kwargs)
                return
            output = probe.stack[-1][0]
            probe.displayed.setdefault(id(output), []).extend(objects)

        monkeypatch.setattr(widgets.Output, "__enter__", enter)
        monkeypatch.setattr(widgets.Output, "__exit__", leave)
        monkeypatch.setattr(IPython.display, "display", display)

    @staticmethod
    def text(output: widgets.Output) -> str:
        return "".join(item.get("text", "") for item in output.outputs)

    def objects(self, output: widgets.Output) -> list[Any]:
        return self.displayed.get(id(output), [])


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> OutputProbe:
    return OutputProbe(monkeypatch)


# -- a notebook kernel whose cell waits at a gate ------------------------------------------------------


class Kernel:
    """A fresh IPython shell with the extension loaded, attached to a run of ``store_url``."""

    def __init__(self, store_url: str, attach: bool = True) -> None:
        self.shell = InteractiveShell()
        self.shell.run_line_magic("load_ext", "durable_nb")
        self.ok("import durable_nb as dnb")
        self.panels: list[GatePanel] = []
        if attach:
            self.ok(f"%durable run review-notebook --store {store_url}")
            # Keep the panels the kernel shows, as a notebook page would.
            shown = self.session.show_gate

            def show_gate(run_id: str, node: str, reason: str, context: Any, gate: str | None = None) -> None:
                self.panels.append(self.session.gate_panel(run_id, node, reason, context, gate))
                shown(run_id, node, reason, context, gate)

            self.session.show_gate = show_gate  # type: ignore[method-assign]

    @property
    def session(self) -> KernelSession:
        return session_for(self.shell)

    @property
    def ns(self) -> dict[str, Any]:
        return self.shell.user_ns

    @property
    def run_id(self) -> str:
        assert self.session.cell_run is not None
        return self.session.cell_run.run_id

    def ok(self, source: str) -> Any:
        result = self.shell.run_cell(source)
        assert result.success, result.error_in_exec or result.error_before_exec
        return result.result

    def pause(self, source: str) -> GatePanel:
        result = self.shell.run_cell(source)
        assert type(result.error_in_exec).__name__ == "GatePending", result.error_in_exec
        return self.panels[-1]


def gate_cell(node: str = "review", reason: str = "ship?") -> str:
    return (
        f"%%durable {node}\n"
        f"d = dnb.gate({reason!r}, {{'draft': '<script>alert(1)</script>', 'total': 42}})\n"
        "shipped = d.approved\nwhy = d.comment\nwho = d.by"
    )


@pytest.fixture
def kernel(store_url: str) -> Iterator[Kernel]:
    yield Kernel(store_url)


def decisions(store_url: str, run_id: str, node: str) -> list[dict[str, Any]]:
    checkpoints = run_sync(dnb.connect(store_url).list_checkpoints(run_id))
    return [c.decision for c in checkpoints if c.step == f"approved:{node}"]


def gate_decided_events(store_url: str, run_id: str, node: str) -> int:
    frame = dnb.events(run_id, store=store_url)
    return int(((frame["type"] == "gate_decided") & (frame["node_id"] == node)).sum())


def other_session(store_url: str) -> tuple[KernelSession, Any]:
    """A kernel session of its own, with its own store connections, attached to no run (another kernel)."""
    session = Kernel(store_url, attach=False).session
    store = new_store(store_url)
    session.store = store
    return session, store


# -- gate panel ----------------------------------------------------------------------------------------


def test_panel_approve_records_shows_and_disables(kernel: Kernel, store_url: str, probe: OutputProbe) -> None:
    """Approve records approved/comment/by in approved:<node>, shows it, disables the panel, continues."""
    panel = kernel.pause(gate_cell())
    assert "ship?" in panel.title.value
    assert "&lt;script&gt;" in panel.context.value and "<script>" not in panel.context.value  # frozen context, escaped
    assert panel.status.value == "Waiting for a decision."
    assert not panel.approve_button.disabled and not panel.reject_button.disabled
    assert repr(panel) == "<GatePanel 'ship?' in cell 'review'>"

    panel.comment.value = "numbers checked"
    panel.approve_button.click()

    [decision] = decisions(store_url, kernel.run_id, "review")
    assert decision["approved"] is True
    assert decision["comment"] == "numbers checked"
    assert decision["by"] == getpass.getuser()
    assert gate_decided_events(store_url, kernel.run_id, "review") == 1
    assert panel.status.value.startswith("<b>Approved</b>")
    assert "numbers checked" in panel.status.value and getpass.getuser() in panel.status.value
    assert panel.approve_button.disabled and panel.reject_button.disabled and panel.comment.disabled
    assert kernel.ns["shipped"] is True and kernel.ns["why"] == "numbers checked"
    assert "Traceback" not in probe.text(panel.output)


def test_panel_reject_records_shows_and_disables(kernel: Kernel, store_url: str) -> None:
    """Reject records approved=False with the comment, shows it and disables the panel."""
    panel = kernel.pause(gate_cell())
    panel.comment.value = "not <yet>"
    panel.reject_button.click()

    [decision] = decisions(store_url, kernel.run_id, "review")
    assert decision["approved"] is False and decision["comment"] == "not <yet>"
    assert decision["by"] == getpass.getuser()
    assert panel.status.value.startswith("<b>Rejected</b>")
    assert "not &lt;yet&gt;" in panel.status.value  # the comment is escaped in the panel
    assert panel.approve_button.disabled and panel.reject_button.disabled
    assert kernel.ns["shipped"] is False and kernel.ns["why"] == "not <yet>"


def test_second_panel_shows_the_existing_decision(kernel: Kernel, store_url: str, probe: OutputProbe) -> None:
    """A second panel of a decided gate shows the decision; clicking it changes nothing and does not fail."""
    first = kernel.pause(gate_cell())
    second = kernel.session.gate_panel(kernel.run_id, "review", "ship?", None)
    first.comment.value = "go"
    first.approve_button.click()

    # The panel that was already on the page: its click reports the decision made elsewhere.
    second.reject_button.click()
    assert second.status.value.startswith("<b>Approved</b>") and "made elsewhere" in second.status.value
    assert second.approve_button.disabled and second.reject_button.disabled
    assert "Traceback" not in probe.text(second.output)
    # A panel opened afterwards shows the decision straight away.
    later = kernel.session.gate_panel(kernel.run_id, "review", "ship?", None)
    assert later.status.value.startswith("<b>Approved</b>") and "go" in later.status.value
    assert later.approve_button.disabled and later.reject_button.disabled

    [decision] = decisions(store_url, kernel.run_id, "review")
    assert decision["approved"] is True and decision["comment"] == "go"
    assert kernel.ns["shipped"] is True


def test_panel_reports_a_decision_made_with_dnb_approve(kernel: Kernel, store_url: str, probe: OutputProbe) -> None:
    """A decision made elsewhere (durable_nb.approve) is shown by a click instead of failing."""
    panel = kernel.pause(gate_cell())
    dnb.approve(kernel.run_id, comment="from the CLI", by="erin", store=store_url)
    panel.reject_button.click()
    assert panel.status.value.startswith("<b>Approved</b>")
    assert "erin" in panel.status.value and "from the CLI" in panel.status.value
    assert panel.approve_button.disabled and panel.reject_button.disabled
    assert "Traceback" not in probe.text(panel.output)
    [decision] = decisions(store_url, kernel.run_id, "review")
    assert decision["by"] == "erin" and decision["approved"] is True
    # Running the cell again continues it with that decision.
    kernel.ok(gate_cell())
    assert kernel.ns["shipped"] is True and kernel.ns["who"] == "erin"


def test_stale_panel_does_not_decide_a_later_gate_of_the_same_cell(kernel: Kernel, store_url: str) -> None:
    """A panel for gate 'first?' decided elsewhere must not decide the cell's next gate 'second?'."""
    cell = "%%durable review\nd1 = dnb.gate('first?')\nd2 = dnb.gate('second?')\nanswers = (d1.approved, d2.approved)"
    stale = kernel.pause(cell)
    other = kernel.session.gate_panel(kernel.run_id, "review", "first?", None)
    other.approve_button.click()  # decides 'first?'; the cell continues and pauses at 'second?'
    assert kernel.panels[-1].reason == "second?"
    assert dnb.get_run(kernel.run_id, store=store_url).pending_interrupt["reason"] == "second?"

    stale.reject_button.click()  # the page still shows the panel of 'first?'
    assert "made elsewhere" in stale.status.value
    assert dnb.get_run(kernel.run_id, store=store_url).status == "paused"  # 'second?' still waits
    assert len(decisions(store_url, kernel.run_id, "review")) == 1


def test_callback_errors_appear_in_the_panel(
    kernel: Kernel, store_url: str, probe: OutputProbe, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failing store shows in the panel (status and Output, since ipywidgets swallows callback errors),
    nothing is recorded, and a retry works."""
    panel = kernel.pause(gate_cell())

    def broken(*args: Any, **kwargs: Any) -> str:
        raise dnb.StoreUnavailable("the database went away (injected)")

    working = gate_panel_module.decide
    monkeypatch.setattr(gate_panel_module, "decide", broken)
    panel.approve_button.click()
    assert "could not be completed" in panel.status.value and ERROR_COLOUR in panel.status.value
    text = probe.text(panel.output)
    assert "Traceback" in text and "the database went away (injected)" in text and "StoreUnavailable" in text
    assert not panel.approve_button.disabled  # nothing was decided: the person can try again
    assert decisions(store_url, kernel.run_id, "review") == []
    assert dnb.get_run(kernel.run_id, store=store_url).status == "paused"

    monkeypatch.setattr(gate_panel_module, "decide", working)  # the store is back
    panel.approve_button.click()
    assert panel.status.value.startswith("<b>Approved</b>")
    assert len(decisions(store_url, kernel.run_id, "review")) == 1
    assert kernel.ns["shipped"] is True


def test_error_after_the_decision_appears_in_the_panel(kernel: Kernel, store_url: str, probe: OutputProbe) -> None:
    """When the continued cell fails after the gate, the decision stays recorded and the error is shown."""
    cell = "%%durable review\nd = dnb.gate('ship?')\nraise RuntimeError('post-gate failure ' + str(d.approved))"
    panel = kernel.pause(cell)
    panel.approve_button.click()
    assert len(decisions(store_url, kernel.run_id, "review")) == 1
    text = probe.text(panel.output)
    assert "RuntimeError" in text and "post-gate failure True" in text
    assert ERROR_COLOUR in panel.status.value
    assert panel.approve_button.disabled and panel.reject_button.disabled  # the decision is made
    assert dnb.get_run(kernel.run_id, store=store_url).status == "failed"


def test_two_panels_deciding_at_once_record_one_decision(kernel: Kernel, store_url: str) -> None:
    """Two panels (two kernels) clicking Approve and Reject at once: one decision, both show it."""
    session_a, store_a = other_session(store_url)
    session_b, store_b = other_session(store_url)
    outcomes = []
    try:
        for trial in range(6):
            node = f"review{trial}"
            kernel.pause(gate_cell(node, f"ship {trial}?"))
            run_id = kernel.run_id
            approver = session_a.gate_panel(run_id, node, f"ship {trial}?", None)
            rejecter = session_b.gate_panel(run_id, node, f"ship {trial}?", None)
            approver.comment.value = "yes"
            rejecter.comment.value = "no"
            start = threading.Barrier(2)
            failures: list[BaseException] = []

            def press(button: widgets.Button, start: threading.Barrier = start, failures: list = failures) -> None:
                try:
                    start.wait(timeout=10)
                    button.click()
                except BaseException as error:  # noqa: BLE001 - reported by the assertion below
                    failures.append(error)

            threads = [
                threading.Thread(target=press, args=(approver.approve_button,)),
                threading.Thread(target=press, args=(rejecter.reject_button,)),
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=60)
            assert not any(t.is_alive() for t in threads) and failures == []

            [decision] = decisions(store_url, run_id, node)
            assert gate_decided_events(store_url, run_id, node) == 1
            verdict = "<b>Approved</b>" if decision["approved"] else "<b>Rejected</b>"
            assert decision["comment"] == ("yes" if decision["approved"] else "no")
            for panel in (approver, rejecter):
                assert panel.status.value.startswith(verdict), panel.status.value
                assert panel.approve_button.disabled and panel.reject_button.disabled
            assert sum("made elsewhere" in p.status.value for p in (approver, rejecter)) == 1
            outcomes.append(decision["approved"])

            kernel.ok(gate_cell(node, f"ship {trial}?"))  # the kernel's cell continues with the one decision
            assert kernel.ns["shipped"] is decision["approved"]
    finally:
        run_sync(store_a.close())
        run_sync(store_b.close())
    print(f"\nwinners over {len(outcomes)} races: {sum(outcomes)} approve, {len(outcomes) - sum(outcomes)} reject")


# -- inspector -------------------------------------------------------------------------------------------


def gated(store_url: str) -> dnb.Workflow:
    flow = dnb.Workflow("gated", store=store_url)

    @flow.node()
    def prepare(state):
        return {"amount": 120}

    @flow.node(after="prepare")
    def review(state):
        decision = dnb.gate("pay?", context={"amount": state["amount"]})
        return {"paid": decision.approved}

    return flow


def checkpoint_of(store_url: str, run_id: str, step: str) -> str:
    frame = dnb.history(run_id, store=store_url)
    return str(frame.loc[frame["step"] == step, "checkpoint_id"].item())


def tree_ids(inspector: Inspector) -> list[str]:
    return [value for _, value in inspector.tree.options]


def test_inspector_lists_the_fork_tree_and_checkpoints(store_url: str) -> None:
    """The inspector lists the whole fork tree and the selected run's checkpoints."""
    flow = pricing(store_url)
    root = flow.run({"rate": 0.1})
    child = flow.fork(root.id, checkpoint_of(store_url, root.id, "after:load"), state={"rate": 0.5})

    inspector = dnb.inspect(root.id, store=store_url)
    assert isinstance(inspector, Inspector)
    assert repr(inspector) == f"<Inspector run {root.id!r}>"
    assert tree_ids(inspector) == [root.id, child.id]
    labels = [label for label, _ in inspector.tree.options]
    assert "completed" in labels[0]
    assert "└" in labels[1] and "from after:load" in labels[1] and "'rate': 0.5" in labels[1]
    assert inspector.tree.value == root.id
    history = dnb.history(root.id, store=store_url)
    assert [value for _, value in inspector.checkpoints.options] == list(history["checkpoint_id"])
    assert "after:total" in inspector.checkpoints.options[2][0]
    assert inspector.checkpoints.value == checkpoint_of(store_url, root.id, "after:total")  # latest but run_end
    assert root.id in inspector.summary.value and "completed" in inspector.summary.value
    assert inspector.approve_button.disabled and inspector.reject_button.disabled  # nothing waits
    assert inspector.cancel_button.disabled  # a completed run cannot be cancelled

    inspector.tree.value = child.id
    child_history = dnb.history(child.id, store=store_url)
    assert [value for _, value in inspector.checkpoints.options] == list(child_history["checkpoint_id"])
    assert child.id in inspector.summary.value
    # Opened on a fork, it shows the same tree.
    assert tree_ids(dnb.inspect(child.id, store=store_url)) == [root.id, child.id]


def test_inspector_forks_at_a_checkpoint_with_overrides(store_url: str) -> None:
    """Fork here creates a fork at the chosen checkpoint with the typed values; the original is untouched."""
    flow = pricing(store_url)
    root = flow.run({"rate": 0.1})
    after_load = checkpoint_of(store_url, root.id, "after:load")
    inspector = dnb.inspect(root.id, store=store_url)
    inspector.checkpoints.value = after_load
    inspector.overrides.value = "rate = 0.5\n# a comment line\n\nlabel = 'half price'\ncount = 4"
    inspector.fork_button.click()

    tree = dnb.forks(root.id, store=store_url)
    assert len(tree) == 2
    created = tree.iloc[1]
    assert created["parent_run_id"] == root.id
    assert created["parent_checkpoint_id"] == after_load
    assert created["fork_step"] == "after:load"
    assert created["overrides"] == {"rate": 0.5, "label": "half price", "count": 4}
    assert created["status"] == "pending"
    state = dnb.get_run(created["run_id"], store=store_url).state
    assert state["rate"] == 0.5 and state["label"] == "half price" and state["count"] == 4
    assert state["prices"] == [10.0, 20.0, 30.0] and "total" not in state
    assert inspector.tree.value == created["run_id"]
    assert created["run_id"] in inspector.status.value and ERROR_COLOUR not in inspector.status.value
    assert tree_ids(inspector) == [root.id, created["run_id"]]

    original = dnb.get_run(root.id, store=store_url)
    assert original.state["rate"] == 0.1 and original.state["total"] == 54.0
    resumed = flow.resume(created["run_id"])  # the fork is a real run: its code continues it
    assert resumed.status == "completed" and resumed.state["total"] == 30.0


def test_inspector_approves_and_rejects_a_paused_run(store_url: str) -> None:
    """Approve / Reject on a paused run record the decision; the workflow continues with it."""
    flow = gated(store_url)
    for approved in (True, False):
        run = flow.run({})
        assert run.status == "paused"
        inspector = dnb.inspect(run.id, store=store_url)
        assert not inspector.approve_button.disabled and not inspector.reject_button.disabled
        assert "pay?" in inspector.summary.value
        # The gate's checkpoint reads as in the history view, not as its stored status.
        [gate_label] = [label for label, _ in inspector.checkpoints.options if "gate:review" in label]
        assert "waiting for a decision" in gate_label and "interrupted" not in gate_label
        (inspector.approve_button if approved else inspector.reject_button).click()

        [decision] = decisions(store_url, run.id, "review")
        assert decision["approved"] is approved
        assert dnb.get_run(run.id, store=store_url).status == "pending"
        assert inspector.approve_button.disabled and inspector.reject_button.disabled
        assert ERROR_COLOUR not in inspector.status.value and "Decision recorded" in inspector.status.value
        finished = flow.resume(run.id)
        assert finished.status == "completed" and finished.state["paid"] is approved
        inspector.refresh()
        [gate_label] = [label for label, _ in inspector.checkpoints.options if "gate:review" in label]
        assert "decided" in gate_label

        inspector.approve_button.click()  # pressed again anyway: refused with a message, nothing recorded
        assert ERROR_COLOUR in inspector.status.value
        assert len(decisions(store_url, run.id, "review")) == 1


def test_inspector_cancels_a_run(store_url: str) -> None:
    """Cancel settles a paused run (cancelled, resumable); cancelling a finished run is refused."""
    flow = gated(store_url)
    run = flow.run({})
    inspector = dnb.inspect(run.id, store=store_url)
    assert not inspector.cancel_button.disabled
    inspector.cancel_button.click()
    cancelled = dnb.get_run(run.id, store=store_url)
    assert cancelled.status == "cancelled" and cancelled.error == "Cancelled by user"
    assert "Cancelled" in inspector.status.value and ERROR_COLOUR not in inspector.status.value
    assert inspector.cancel_button.disabled
    assert "cancelled" in inspector.tree.options[0][0]

    inspector.cancel_button.click()  # pressed again anyway
    assert ERROR_COLOUR in inspector.status.value
    assert dnb.get_run(run.id, store=store_url).status == "cancelled"


def test_inspector_compare_shows_a_dataframe(store_url: str, probe: OutputProbe) -> None:
    """Compare shows the chosen runs side by side as a DataFrame in its output (the whole tree by default)."""
    flow = pricing(store_url)
    root = flow.run({"rate": 0.1})
    child = flow.fork(root.id, state={"rate": 0.5})
    other = dnb.fork(root.id, state={"rate": 0.9}, store=store_url)
    inspector = dnb.inspect(root.id, store=store_url)

    inspector.compare_with.value = (root.id, child.id)
    inspector.compare_button.click()
    [frame] = probe.objects(inspector.comparison)
    assert isinstance(frame, pd.DataFrame)
    assert list(frame.index) == [root.id, child.id]
    assert list(frame["rate"]) == [0.1, 0.5]
    assert "total" in frame.columns and "fork_point" in frame.columns

    inspector.compare_with.value = ()
    inspector.compare_button.click()
    whole = probe.objects(inspector.comparison)[-1]
    assert list(whole.index) == [root.id, child.id, other.id]


def test_inspector_refresh_picks_up_a_fork_made_elsewhere(store_url: str) -> None:
    """A fork made from code appears after refresh() or the Refresh button."""
    flow = pricing(store_url)
    root = flow.run({"rate": 0.1})
    inspector = dnb.inspect(root.id, store=store_url)
    first = dnb.fork(root.id, state={"rate": 0.7}, store=store_url)
    assert tree_ids(inspector) == [root.id]  # not yet refreshed
    inspector.refresh()
    assert tree_ids(inspector) == [root.id, first.id]
    assert "pending" in inspector.tree.options[1][0]
    second = flow.fork(first.id, state={"rate": 0.8})
    inspector.refresh_button.click()
    assert tree_ids(inspector) == [root.id, first.id, second.id]
    assert inspector.tree.value == root.id  # the selection is kept


# -- hostile override text ------------------------------------------------------------------------------


def hostile_inputs(marker: Path) -> list[tuple[str, str]]:
    """(override text, what the refusal says); every payload would touch ``marker`` if it ran."""
    path = str(marker)
    not_literal = "not a Python literal"
    return [
        ("rate = __import__('os')", not_literal),
        (f"rate = __import__('os').system('touch {path}')", not_literal),
        (f"rate = os.system('touch {path}')", not_literal),
        (f"rate = (lambda: open({path!r}, 'w'))()", not_literal),
        ("rate = lambda: 0.5", not_literal),
        (f"rate = f\"{{open({path!r}, 'w')}}\"", not_literal),
        ("rate = f'0.5'", not_literal),
        ("rate = ().__class__.__base__.__subclasses__()", not_literal),
        ("rate = os.path", not_literal),
        (f"rate = open({path!r}, 'w')", not_literal),
        (f"rate = (x := open({path!r}, 'w'))", not_literal),
        (f"rate = 0.5; open({path!r}, 'w')", not_literal),
        ("rate = 2 ** 10000", not_literal),
        ("rate = 'a' * 10 ** 9", not_literal),
        ("rate = " + "[" * 1000 + "]" * 1000, not_literal),
        ("rate = '" + "a" * (MAX_OVERRIDE_CHARS + 10) + "'", f"limited to {MAX_OVERRIDE_CHARS:,} characters"),
        ("rate = '" + "a" * 20_000 + "'", "longer than 10,000 characters"),
        ("1x = 2", "write name = python literal"),
        ("a.b = 3", "write name = python literal"),
        ("prices[0] = 3", "write name = python literal"),
        ("rate 0.5", "write name = python literal"),
        ("rate == 0.5", not_literal),
        ("rate = 0.6\n= 0.5", "Line 2"),
    ]


def test_parse_overrides_refuses_code_and_bad_input(tmp_path: Path) -> None:
    """parse_overrides refuses code, huge or deep input, bad names and missing '='; no code runs."""
    marker = tmp_path / "ran.txt"
    for text, message in hostile_inputs(marker):
        with pytest.raises(dnb.InvalidInput) as refused:
            parse_overrides(text)
        assert message in str(refused.value), (text[:80], str(refused.value))
        with pytest.raises(dnb.InvalidInput):
            parse_overrides(text.splitlines())  # the --set list form too
    assert not marker.exists()
    # What is allowed, to show the refusals are about the input.
    assert parse_overrides("rate = 0.5\n# note\n\ntags = ['a', (1, 2)]\nok = None\nlimits = {'max': -3}") == {
        "rate": 0.5,
        "tags": ["a", (1, 2)],
        "ok": None,
        "limits": {"max": -3},
    }


def test_parse_overrides_keeps_the_types_at_the_fork_point() -> None:
    """An override keeps a value's type: a str for a float or a bool for an int is refused; ints and floats mix."""
    current = {"rate": 0.1, "count": 3, "flag": True, "prices": [1.0], "note": None}
    for text, message in [
        ("rate = 'high'", "rate is float at this checkpoint; str would not fit"),
        ("count = True", "count is int at this checkpoint; bool would not fit"),
        ("flag = 1", "flag is bool at this checkpoint; int would not fit"),
        ("prices = (1.0,)", "prices is list at this checkpoint; tuple would not fit"),
        ("count = '3'", "count is int at this checkpoint; str would not fit"),
    ]:
        with pytest.raises(dnb.InvalidInput, match="Line 1: ") as refused:
            parse_overrides(text, current)
        assert message in str(refused.value)
    assert parse_overrides("rate = 1\ncount = 2.5\nnote = 'x'\nnew = [1]", current) == {
        "rate": 1,
        "count": 2.5,
        "note": "x",
        "new": [1],
    }


def test_inspector_fork_refuses_hostile_overrides(store_url: str, tmp_path: Path, probe: OutputProbe) -> None:
    """The inspector's Fork button refuses every hostile or ill-typed input with a message; no fork, no code."""
    marker = tmp_path / "ran.txt"
    flow = pricing(store_url)
    root = flow.run({"rate": 0.1})
    inspector = dnb.inspect(root.id, store=store_url)
    cases = [
        *hostile_inputs(marker),
        ("rate = 'high'", "rate is float at this checkpoint; str would not fit"),
        ("count = True", "count is int at this checkpoint; bool would not fit"),
        ("prices = 'cheap'", "prices is list at this checkpoint; str would not fit"),
    ]
    for text, message in cases:
        inspector.checkpoints.value = checkpoint_of(store_url, root.id, "after:total")
        inspector.overrides.value = text
        inspector.status.value = ""
        inspector.fork_button.click()
        assert ERROR_COLOUR in inspector.status.value, text[:80]
        shown = inspector.status.value.replace("&#x27;", "'").replace("&quot;", '"')
        assert message in shown, (text[:80], inspector.status.value[:300])
        assert tree_ids(inspector) == [root.id]
    assert "Traceback" not in probe.text(inspector.output)
    assert len(dnb.forks(root.id, store=store_url)) == 1
    assert list(dnb.runs(store=store_url)["run_id"]) == [root.id]
    assert not marker.exists()
    # The same inspector still forks with good input afterwards.
    inspector.overrides.value = "rate = 0.25"
    inspector.fork_button.click()
    assert len(dnb.forks(root.id, store=store_url)) == 2
