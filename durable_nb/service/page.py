"""The approvals page: every open gate across runs, with its frozen context, Approve and Reject.

Server-rendered HTML, every value escaped, no script and no build step. A browser signs in once
with ``/?token=…``, which sets an HttpOnly, SameSite=Strict cookie (so another site cannot make
the browser decide a gate); the forms post back to the server, which answers with the page.
"""

from __future__ import annotations

import html
import json
import time
from datetime import UTC, datetime
from typing import Any

from ..model import PendingInterrupt, RunStatus
from ..store import Store

__all__ = ["COOKIE", "approvals_page", "history_page"]

COOKIE = "durable_nb_token"

_STYLE = """
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
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "no deadline"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _ago(seconds: float) -> str:
    waited = max(0, int(time.time() - seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if waited >= size:
            return f"{waited // size} {unit}"
    return f"{waited} s"


def _page(title: str, body: str) -> str:
    return (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'><style>{_STYLE}</style></head>"
        f"<body>{body}</body></html>"
    )


def _gate(kind: str, name: str, gate: PendingInterrupt) -> str:
    context = json.dumps(gate.context, indent=2, ensure_ascii=False, default=str)
    path = f"<div class='meta'>agent path {_e(gate.agent_path)}</div>" if gate.agent_path else ""
    return (
        f"<section class='gate' data-run='{_e(gate.run_id)}'>"
        f"<h2>{_e(gate.reason)}</h2>"
        f"<div class='meta'>{_e(kind)} <b>{_e(name)}</b> · run <a href='/runs/{_e(gate.run_id)}'>{_e(gate.run_id)}</a>"
        f" · node {_e(gate.node_id)} · asked of anyone with the decide scope</div>"
        f"<div class='meta'>waiting {_ago(gate.created_at)} (since {_when(gate.created_at)}) · deadline "
        f"{_when(gate.expires_at)}{'' if gate.expires_at is None else ' then ' + _e(gate.on_timeout)}</div>{path}"
        f"<pre>{_e(context)}</pre>"
        f"<form method='post' action='/runs/{_e(gate.run_id)}/decide'>"
        f"<input type='hidden' name='node' value='{_e(gate.node_id)}'>"
        "<label>Comment <textarea name='comment'></textarea></label>"
        "<button class='approve' name='approved' value='true'>Approve</button>"
        "<button class='reject' name='approved' value='false'>Reject</button>"
        "</form></section>"
    )


async def approvals_page(store: Store, note: str | None = None, error: bool = False) -> str:
    """Return the page of every open gate, oldest first (``note``: the outcome of the last decision)."""
    gates: list[tuple[str, str, PendingInterrupt]] = []
    for run in await store.list_runs(statuses=[RunStatus.PAUSED]):
        gates += [(run.kind.value, run.name, gate) for gate in await store.pending_interrupts(run.run_id)]
    gates.sort(key=lambda found: found[2].created_at)
    told = f"<p class='note{' error' if error else ''}'>{_e(note)}</p>" if note else ""
    listed = "".join(_gate(*found) for found in gates) or "<p>No gate is waiting for a decision.</p>"
    return _page("Approvals · durable_nb", f"<h1>Waiting for a decision ({len(gates)})</h1>{told}{listed}")


async def history_page(store: Store, rows: list[dict[str, Any]], run_id: str) -> str:
    """Return a run's history as a table."""
    run = await store.get_run(run_id)
    columns = ("seq", "step", "status", "created_at", "duration", "error")
    head = "".join(f"<th>{c}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{_e('' if r.get(c) is None else r[c])}</td>" for c in columns) + "</tr>" for r in rows
    )
    return _page(
        f"Run {run_id} · durable_nb",
        f"<p><a href='/'>← approvals</a></p><h1>{_e(run.name)} · {_e(run_id)}</h1>"
        f"<p class='meta'>status <b>{_e(run.status.value)}</b>{' · ' + _e(run.error) if run.error else ''}</p>"
        f"<table><tr>{head}</tr>{body}</table>",
    )
