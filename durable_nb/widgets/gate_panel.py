"""The gate panel: a paused cell's frozen context, Approve / Reject, a comment.

A click decides the gate through the engine's one decision call, which claims it atomically;
a decision someone made elsewhere is shown instead of an error. The panel knows nothing of
the notebook: what continues the cell after a decision is handed in (``KernelLink``).
Everything a callback prints or raises goes to the panel's own Output area, since JupyterLab
drops callback output and ipywidgets swallows callback exceptions.
"""

from __future__ import annotations

import html
import json
import traceback
from typing import Any

import ipywidgets as widgets

from .._loop import run_sync
from ..engine.gates.decisions import decide, latest_decision, make_decision, open_gate
from ..errors import AlreadyResumed, GatePending
from ..model import Decision
from ..store.protocol import Store
from .link import KernelLink

__all__ = ["GatePanel"]


def _context_html(context: Any) -> str:
    if isinstance(context, dict) and context:
        cell = "<pre style='margin:0;white-space:pre-wrap'>{}</pre>"
        rows = "".join(
            f"<tr><th style='text-align:left;vertical-align:top;padding-right:1em'>{html.escape(str(k))}</th>"
            f"<td style='text-align:left'>{cell.format(html.escape(_text(v)))}</td></tr>"
            for k, v in context.items()
        )
        return f"<table>{rows}</table>"
    if context is None:
        return "<i>no context</i>"
    return f"<pre style='margin:0;white-space:pre-wrap'>{html.escape(_text(context))}</pre>"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)


class GatePanel(widgets.VBox):
    """Approve / Reject buttons for one paused cell, bound to its gate in the store.

    ``gate`` is the checkpoint that opened the gate (found from ``reason`` when not given): a
    click decides that gate and no other. ``link`` continues the cell after a decision.
    """

    def __init__(
        self,
        store: Store,
        *,
        run_id: str,
        node_id: str,
        reason: str,
        context: Any,
        gate: str | None = None,
        link: KernelLink | None = None,
    ) -> None:
        self.store = store
        self.link = link
        self.run_id = run_id
        self.node_id = node_id
        self.reason = reason
        self.title = widgets.HTML(
            f"<b>Approval needed: {html.escape(reason)}</b> "
            f"<span style='color:#6b7280'>(cell <code>{html.escape(node_id)}</code>, run "
            f"<code>{html.escape(run_id)}</code>)</span>"
        )
        self.context = widgets.HTML(_context_html(context))
        self.comment = widgets.Textarea(placeholder="Comment (optional)", layout=widgets.Layout(width="100%"))
        self.approve_button = widgets.Button(description="Approve", button_style="success", icon="check")
        self.reject_button = widgets.Button(description="Reject", button_style="danger", icon="times")
        self.status = widgets.HTML("Waiting for a decision.")
        self.output = widgets.Output()
        self.approve_button.on_click(lambda _: self._decide(True))
        self.reject_button.on_click(lambda _: self._decide(False))
        super().__init__(
            [
                self.title,
                self.context,
                self.comment,
                widgets.HBox([self.approve_button, self.reject_button]),
                self.status,
                self.output,
            ],
            layout=widgets.Layout(border="1px solid #d97706", padding="8px", width="100%"),
        )
        self.gate = gate
        if gate is None:
            pending = run_sync(open_gate(store, run_id, node_id, reason))
            if pending is not None:
                self.gate = pending.checkpoint_id
            else:
                self._show_outcome_elsewhere("")

    def __repr__(self) -> str:
        # Stable text for nbval and plain consoles.
        return f"<GatePanel {self.reason!r} in cell {self.node_id!r}>"

    def _show_decided(self, decision: Decision, note: str) -> None:
        verdict = "Approved" if decision.approved else "Rejected"
        who = html.escape(str(decision.by or "someone"))
        said = f" — “{html.escape(decision.comment)}”" if decision.comment else ""
        self.status.value = f"<b>{verdict}</b> by {who}{said}. {html.escape(note)}"
        self.approve_button.disabled = self.reject_button.disabled = self.comment.disabled = True

    def _show_outcome_elsewhere(self, note: str) -> None:
        decided = run_sync(latest_decision(self.store, self.run_id, self.node_id))
        if decided is not None:
            self._show_decided(decided, note)
        else:
            self.status.value = "This gate is no longer open (the run was cancelled or moved on)."
            self.approve_button.disabled = self.reject_button.disabled = True

    def _decide(self, approved: bool) -> None:
        with self.output:
            try:
                # Nobody named: the user this kernel runs as, as for every other way of deciding.
                decision = make_decision(approved, None, self.comment.value or None)
                # A kernel attached to the run takes it in the decision's own commit, to continue the cell.
                owner = self.link.owner_for(self.run_id) if self.link is not None else None
                result = run_sync(
                    decide(self.store, self.run_id, decision, self.node_id, gate=self.gate, continue_as=owner)
                )
                if self.link is None:
                    self._show_decided(decision, "The run continues where its code runs.")
                    return
                self._show_decided(decision, "Continuing the cell…")
                try:
                    note = self.link.continue_after(result)
                except GatePending:
                    raise
                except Exception:  # noqa: BLE001 - the cell's own error, shown below
                    self._show_decided(decision, "")
                    self.status.value += (
                        "<span style='color:#dc2626'> The decision is recorded; the cell failed when it "
                        "continued (see below). Fix it and run the cell again.</span>"
                    )
                    traceback.print_exc()
                    return
                self._show_decided(decision, note)
            except GatePending as pending:
                self.status.value += f" {html.escape(str(pending))}"
            except AlreadyResumed:
                self._show_outcome_elsewhere("This decision was made elsewhere; run the cell again to continue.")
            except Exception:  # noqa: BLE001 - shown in the panel: callbacks must never fail silently
                self.status.value = "<b style='color:#dc2626'>The decision could not be completed; see below.</b>"
                traceback.print_exc()
