"""The gate panel: a paused cell's frozen context, Approve / Reject, a comment.

A click records the decision atomically; a decision someone made elsewhere is shown instead
of an error. Everything a callback prints or raises goes to the panel's own Output area,
since JupyterLab drops callback output and ipywidgets swallows callback exceptions.
"""

from __future__ import annotations

import getpass
import html
import json
import traceback
from typing import Any

import ipywidgets as widgets

from ..errors import AlreadyResumed, GatePending

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
    """Approve / Reject buttons for one paused cell, bound to the run in the store."""

    def __init__(self, session: Any, *, run_id: str, node_id: str, reason: str, context: Any) -> None:
        self.session = session
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
        decided = session.recorded_decision(run_id, node_id)
        if decided is not None and session.run_status(run_id) != "paused":
            self._show_decided(decided, "")

    def __repr__(self) -> str:
        # Stable text for nbval and plain consoles.
        return f"<GatePanel {self.reason!r} in cell {self.node_id!r}>"

    def _show_decided(self, decision: dict[str, Any], note: str) -> None:
        verdict = "Approved" if decision.get("approved") else "Rejected"
        who = html.escape(str(decision.get("by") or "someone"))
        comment = decision.get("comment")
        said = f" — “{html.escape(comment)}”" if comment else ""
        self.status.value = f"<b>{verdict}</b> by {who}{said}. {html.escape(note)}"
        self.approve_button.disabled = self.reject_button.disabled = self.comment.disabled = True

    def _decide(self, approved: bool) -> None:
        with self.output:
            try:
                by = _user()
                self.session.record(
                    self.run_id,
                    self.node_id,
                    approved=approved,
                    comment=self.comment.value or None,
                    by=by,
                    reason=self.reason,
                )
                decision = self.session.recorded_decision(self.run_id, self.node_id) or {"approved": approved, "by": by}
                self._show_decided(decision, "Continuing the cell…")
                try:
                    note = self.session.continue_cell(self.run_id, self.node_id)
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
                decided = self.session.recorded_decision(self.run_id, self.node_id)
                if decided is not None:
                    self._show_decided(decided, "This decision was made elsewhere; run the cell again to continue.")
                else:
                    self.status.value = "This gate is no longer open (the run was cancelled or moved on)."
                    self.approve_button.disabled = self.reject_button.disabled = True
            except Exception:  # noqa: BLE001 - shown in the panel: callbacks must never fail silently
                self.status.value = "<b style='color:#dc2626'>The decision could not be completed; see below.</b>"
                traceback.print_exc()


def _user() -> str | None:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - a decision without a user name is still a decision
        return None
