"""The Run handle users hold: a run's identity, status and state."""

from __future__ import annotations

import html
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from ..._loop import run_sync
from ...model import STATUS_COLOURS, PendingInterrupt, RunRecord, RunStatus
from ...store.protocol import Store
from ...store.secret import load_secret
from ..gates.decisions import current_run
from ..state.values import ValueCodec
from ..workflows.graph import ITEM_KEY_PREFIX

__all__ = ["Run", "load_run"]


def _visible(state: dict[str, Any]) -> dict[str, Any]:
    # A map's finished items wait under internal keys until the whole map commits.
    if any(key.startswith(ITEM_KEY_PREFIX) for key in state):
        return {k: v for k, v in state.items() if not k.startswith(ITEM_KEY_PREFIX)}
    return state


class Run:
    """A durable run: ``id, name, status, error, state, pending_interrupt`` and its fork parent."""

    def __init__(
        self,
        record: RunRecord,
        *,
        pending: list[PendingInterrupt],
        state: dict[str, Any] | None = None,
        load_state: Callable[[], Awaitable[dict[str, Any]]] | None = None,
    ) -> None:
        self.record = record
        self.pending = pending
        self._state = state
        self._load_state = load_state

    @property
    def id(self) -> str:
        """The run's id, a UUIDv7 (ids sort by creation time)."""
        return self.record.run_id

    @property
    def name(self) -> str:
        """The name of the workflow, notebook or agent the run belongs to."""
        return self.record.name

    @property
    def status(self) -> str:
        """The run's status, as text (pending, running, paused, failed, cancelled or completed)."""
        return self.record.status.value

    @property
    def error(self) -> str | None:
        """Why the run failed or was cancelled, else None."""
        return self.record.error

    @property
    def parent_run_id(self) -> str | None:
        """The run this one was forked from, else None."""
        return self.record.parent_run_id

    @property
    def parent_checkpoint_id(self) -> str | None:
        """The checkpoint of the parent run this fork starts from, else None."""
        return self.record.parent_checkpoint_id

    @property
    def idempotency_key(self) -> str | None:
        """The key the run was started with, else None."""
        return self.record.idempotency_key

    @property
    def created_at(self) -> datetime:
        """When the run was created (UTC)."""
        return datetime.fromtimestamp(self.record.created_at, UTC)

    @property
    def updated_at(self) -> datetime:
        """When the run last changed (UTC)."""
        return datetime.fromtimestamp(self.record.updated_at, UTC)

    @property
    def pending_interrupt(self) -> dict[str, Any] | None:
        """``{reason, context, node_id, agent_path}`` of the gate the run waits at, else None."""
        return self.pending[0].as_dict() if self.pending else None

    @property
    def pending_interrupts(self) -> list[dict[str, Any]]:
        """Every gate the run waits at (a wave can pause at several)."""
        return [p.as_dict() for p in self.pending]

    @property
    def state(self) -> dict[str, Any]:
        """The run's state at its latest checkpoint (loaded from the store on first access)."""
        if self._state is None:
            self._state = run_sync(self._load_state()) if self._load_state is not None else {}
        return _visible(self._state)

    async def astate(self) -> dict[str, Any]:
        """Load the state from async code."""
        if self._state is None:
            self._state = await self._load_state() if self._load_state is not None else {}
        return _visible(self._state)

    def __repr__(self) -> str:
        extra = f", error={self.error!r}" if self.error else ""
        gate = f", waiting_at={self.pending[0].node_id!r}" if self.pending else ""
        return f"Run(id={self.id!r}, name={self.name!r}, status={self.status!r}{gate}{extra})"

    def _repr_html_(self) -> str:
        colour = STATUS_COLOURS[self.record.status]
        rows = [
            ("run", f"<code>{html.escape(self.id)}</code>"),
            ("name", html.escape(self.name)),
            ("status", f'<b style="color:{colour}">{self.status}</b>'),
            ("created", self.created_at.strftime("%Y-%m-%d %H:%M:%S UTC")),
        ]
        if self.error:
            rows.append(("error", f"<pre style='margin:0;white-space:pre-wrap'>{html.escape(self.error)}</pre>"))
        for pending in self.pending:
            rows.append(
                (
                    "waiting at",
                    f"gate <b>{html.escape(pending.reason)}</b> in node <code>{html.escape(pending.node_id)}</code>",
                )
            )
        if self.parent_run_id:
            rows.append(("forked from", f"<code>{html.escape(self.parent_run_id)}</code>"))
        body = "".join(
            f"<tr><th style='text-align:left'>{k}</th><td style='text-align:left'>{v}</td></tr>" for k, v in rows
        )
        return f"<table class='durable-nb-run'>{body}</table>"


async def load_run(store: Store, run_id: str, record: RunRecord | None = None) -> Run:
    """Return a Run (``record``: its row, if just read) whose state loads from its latest
    checkpoint on first access."""
    record = await current_run(store, run_id, record)
    pending = await store.pending_interrupts(run_id) if record.status is RunStatus.PAUSED else []

    return Run(record, pending=pending, load_state=_StoredState(store, run_id))


class _StoredState:
    """Loads a run's latest state from its store; pickled as the store's URL, so that a Run a notebook
    cell holds is committed with the cell and loads its state again after a restore."""

    def __init__(self, store: Store, run_id: str) -> None:
        self.store: Store | None = store
        self.url = store.url
        self.run_id = run_id

    def __getstate__(self) -> dict[str, Any]:
        return {"store": None, "url": self.url, "run_id": self.run_id}

    async def __call__(self) -> dict[str, Any]:
        if self.store is None:
            from ...store import connect

            self.store = connect(self.url, create=False)
        state = await self.store.state_at(self.run_id)
        return await ValueCodec(self.store, load_secret()).load(state.manifest)
