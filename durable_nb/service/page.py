"""The approvals page: every open gate across runs, with its frozen context, Approve and Reject;
below them, the store's schedules with their next and last runs.

Server-rendered HTML, every value escaped, no script and no build step; its one stylesheet is
inline and allowed by its hash (``STYLE_HASH``, in the Content-Security-Policy). A browser signs
in once with ``/?token=…``, which sets an HttpOnly, SameSite=Strict cookie; every form carries
the session's CSRF token (see ``forms``) and posts back to the server, which answers with the
page. Times are local to the second (the UTC instant on hover) and durations read as in the
notebook views, with the same helpers; a gate's checkpoint is called what it is.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..model import STATUS_COLOURS, PendingInterrupt, RunStatus, format_seconds
from ..store import Store
from ..store.schedules import ScheduleRecord
from ..views import ahistory
from ..views.render import LABEL_COLOURS, checkpoint_labels, human_duration, local_time

__all__ = [
    "COOKIE",
    "STYLE_HASH",
    "PageForms",
    "WaitingGate",
    "approvals_html",
    "approvals_page",
    "history_page",
    "refusal_page",
    "waiting_gates",
]

COOKIE = "durable_nb_token"

_STATUS_STYLE = "".join(
    f'.status[data-status="{status}"] {{ border-color: {colour}; }}\n'
    for status, colour in {**STATUS_COLOURS, **LABEL_COLOURS}.items()
)
_STYLE = (
    """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 70rem; color: #1d2330; }
h1 { font-size: 1.4rem; } table { border-collapse: collapse; width: 100%; }
td, th { border-bottom: 1px solid #dde1e8; padding: .45rem .6rem; text-align: left; vertical-align: top; }
pre { background: #f4f6f9; padding: .5rem; margin: 0; white-space: pre-wrap; max-width: 28rem; }
.gate { border: 1px solid #cfd6e2; border-radius: 8px; padding: 1rem 1.2rem; margin: 1rem 0; }
.meta { color: #5a6478; font-size: .9rem; } textarea { width: 100%; min-height: 2.5rem; }
button { font-size: 1rem; padding: .35rem 1.1rem; margin: .4rem .6rem 0 0; border-radius: 6px; border: 0; }
.approve { background: #1f7a3d; color: white; } .reject { background: #a3262a; color: white; }
.note { background: #eef6ee; border: 1px solid #b9d8bd; padding: .6rem 1rem; border-radius: 6px; }
.error { background: #fbeeee; border-color: #e1b4b6; }
.status { border: 1px solid #6b7280; border-left-width: .5rem; border-radius: 4px; padding: 0 .4rem; }
"""
    + _STATUS_STYLE
)
# The Content-Security-Policy allows this stylesheet by its hash, and no other style or script.
STYLE_HASH = "sha256-" + base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _time(seconds: float | None) -> str:
    import pandas as pd

    return "" if seconds is None else local_time(pd.Timestamp(seconds, unit="s", tz="UTC"))


def _page(title: str, body: str) -> str:
    return (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'><style>{_STYLE}</style></head>"
        f"<body>{body}</body></html>"
    )


@dataclass(frozen=True, slots=True)
class WaitingGate:
    """An open gate as the page lists it: its run's kind and name, the gate, and the hidden fields
    its form carries besides the node (which store and run it is in, where one server has many)."""

    kind: str
    name: str
    gate: PendingInterrupt
    fields: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class PageForms:
    """How the page's forms reach the server that renders it: where each posts, the CSRF field it
    carries (name and value), where a run's history is shown (None: nowhere), and who may decide."""

    action: Callable[[WaitingGate], str]
    csrf_field: str
    csrf_value: str
    run_link: Callable[[str], str] | None = None
    deciders: str = "anyone with the decide scope"


def _hidden(name: str, value: str) -> str:
    return f"<input type='hidden' name='{_e(name)}' value='{_e(value)}'>"


def _gate(waiting: WaitingGate, forms: PageForms) -> str:
    gate = waiting.gate
    context = json.dumps(gate.context, indent=2, ensure_ascii=False, default=str)
    path = f"<div class='meta'>agent path {_e(gate.agent_path)}</div>" if gate.agent_path else ""
    waited = format_seconds(max(0, int(time.time() - gate.created_at)))
    deadline = "no deadline"
    if gate.expires_at is not None:
        deadline = f"deadline {_time(gate.expires_at)} then {_e(gate.on_timeout)}"
    run = _e(gate.run_id)
    if forms.run_link is not None:
        run = f"<a href='{_e(forms.run_link(gate.run_id))}'>{run}</a>"
    fields = "".join(_hidden(name, value) for name, value in waiting.fields)
    return (
        f"<section class='gate' data-run='{_e(gate.run_id)}'>"
        f"<h2>{_e(gate.reason)}</h2>"
        f"<div class='meta'>{_e(waiting.kind)} <b>{_e(waiting.name)}</b> · run {run}"
        f" · node {_e(gate.node_id)} · asked of {_e(forms.deciders)}</div>"
        f"<div class='meta'>waiting {_e(waited)} (since {_time(gate.created_at)}) · {deadline}</div>{path}"
        f"<pre>{_e(context)}</pre>"
        f"<form method='post' action='{_e(forms.action(waiting))}'>"
        f"{_hidden(forms.csrf_field, forms.csrf_value)}{fields}{_hidden('node', gate.node_id)}"
        "<label>Comment <textarea name='comment'></textarea></label>"
        "<button class='approve' name='approved' value='true'>Approve</button>"
        "<button class='reject' name='approved' value='false'>Reject</button>"
        "</form></section>"
    )


async def waiting_gates(store: Store, fields: tuple[tuple[str, str], ...] = ()) -> list[WaitingGate]:
    """Return every open gate of a store, each form carrying ``fields`` as well."""
    gates: list[WaitingGate] = []
    for run in await store.list_runs(statuses=[RunStatus.PAUSED]):
        gates += [WaitingGate(run.kind.value, run.name, g, fields) for g in await store.pending_interrupts(run.run_id)]
    return gates


def _schedules(schedules: Sequence[ScheduleRecord], run_link: Callable[[str], str] | None) -> str:
    """The table of schedules: what each starts, when, and its next and last runs."""
    if not schedules:
        return ""
    rows = []
    for schedule in schedules:
        last = _time(schedule.last_run) if schedule.last_run is not None else "not yet"
        if schedule.last_run_id is not None:
            run = _e(schedule.last_run_id)
            if run_link is not None:
                run = f"<a href='{_e(run_link(schedule.last_run_id))}'>{run}</a>"
            last += f" · run {run}"
        rows.append(
            f"<tr data-schedule='{_e(schedule.schedule_id)}'><td>{_e(schedule.kind)} <b>{_e(schedule.target)}</b>"
            f"<div class='meta'>{_e(schedule.schedule_id)}</div></td>"
            f"<td><code>{_e(schedule.cron)}</code> <span class='meta'>{_e(schedule.timezone)}</span></td>"
            f"<td>{_time(schedule.next_run)}</td><td>{last}</td><td>{_e(schedule.missed)}</td></tr>"
        )
    head = "".join(f"<th>{c}</th>" for c in ("starts", "cron", "next run", "last run", "missed times"))
    return f"<h2>Schedules ({len(schedules)})</h2><table class='schedules'><tr>{head}</tr>{''.join(rows)}</table>"


def approvals_html(
    gates: list[WaitingGate],
    forms: PageForms,
    note: str | None = None,
    error: bool = False,
    schedules: Sequence[ScheduleRecord] = (),
) -> str:
    """Return the page of ``gates``, oldest first, its forms made by ``forms`` (``note``: the outcome
    of the last decision), then the ``schedules`` with their next and last runs."""
    ordered = sorted(gates, key=lambda waiting: waiting.gate.created_at)
    told = f"<p class='note{' error' if error else ''}'>{_e(note)}</p>" if note else ""
    listed = "".join(_gate(w, forms) for w in ordered) or "<p>No gate is waiting for a decision.</p>"
    planned = _schedules(schedules, forms.run_link)
    return _page("Approvals · durable_nb", f"<h1>Waiting for a decision ({len(ordered)})</h1>{told}{listed}{planned}")


async def approvals_page(store: Store, csrf: str, note: str | None = None, error: bool = False) -> str:
    """Return the service's page of every open gate, oldest first, its forms carrying ``csrf`` (``note``:
    the outcome of the last decision), and the store's schedules."""
    forms = PageForms(
        action=lambda waiting: f"/runs/{waiting.gate.run_id}/decide",
        csrf_field="csrf",
        csrf_value=csrf,
        run_link=lambda run_id: f"/runs/{run_id}",
    )
    return approvals_html(await waiting_gates(store), forms, note, error, await store.list_schedules())


async def history_page(store: Store, run_id: str) -> str:
    """Return a run's history as a table: human times and durations, a gate's checkpoint named for what it is."""
    import pandas as pd

    run = await store.get_run(run_id)
    frame = await ahistory(run_id, store=store)
    rows = []
    columns = (frame["seq"], frame["step"], checkpoint_labels(frame), frame["created_at"], frame["duration"])
    for seq, step, label, at, took, error in zip(*columns, frame["error"], strict=True):
        shown_error = "" if pd.isna(error) else _e(error)
        rows.append(
            f"<tr><td>{_e(seq)}</td><td>{_e(step)}</td>"
            f"<td><span class='status' data-status='{_e(label)}'>{_e(label)}</span></td>"
            f"<td>{local_time(at)}</td><td>{_e(human_duration(took))}</td><td>{shown_error}</td></tr>"
        )
    head = "".join(f"<th>{c}</th>" for c in ("seq", "step", "status", "time", "duration", "error"))
    return _page(
        f"Run {run_id} · durable_nb",
        f"<p><a href='/'>← approvals</a></p><h1>{_e(run.name)} · {_e(run_id)}</h1>"
        f"<p class='meta'>status <span class='status' data-status='{_e(run.status.value)}'>{_e(run.status.value)}"
        f"</span>{' · ' + _e(run.error) if run.error else ''}</p>"
        f"<table><tr>{head}</tr>{''.join(rows)}</table>",
    )


def refusal_page(message: str, hint: str = "") -> str:
    """Return the page that says why a request was refused, and what to do."""
    return _page("Not allowed · durable_nb", f"<p>{_e(message)}</p><p>{_e(hint)}</p>")
