"""The node scope: which run and node the current code runs in (a context variable)."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Any

from ...model import Decision
from ...store.protocol import Store

__all__ = ["NodeScope", "current_scope", "enter_scope"]


@dataclass(slots=True)
class NodeScope:
    """What gate(), interrupt() and @idempotent need to know about the running node."""

    run_id: str
    node_id: str
    store: Store
    secret: bytes
    decisions: list[Decision] = field(default_factory=list)
    agent_path: str | None = None
    gate_calls: int = 0
    # Where an agent in this node writes its checkpoints (the node's runner), and its map item.
    steps: Any = None
    item_index: int | None = None
    # How many agents of each path this execution of the node has started (a second one is '#2').
    agent_calls: dict[str, int] = field(default_factory=dict)
    # While a supervisor's worker runs: the supervisor's call id that started it.
    invocation: str | None = None
    # On an executor's worker: the @idempotent results the owner shipped, and the new ones.
    remote: Any = None
    # The checkpoint the run continued from (a decision's, when one resumed it): named by gate events.
    resumed_from: str | None = None


_current: contextvars.ContextVar[NodeScope | None] = contextvars.ContextVar("durable_nb_scope", default=None)


def current_scope() -> NodeScope | None:
    """Return the scope of the node running in this context, if any."""
    return _current.get()


def enter_scope(scope: NodeScope | None) -> contextvars.Token[NodeScope | None]:
    """Make ``scope`` current; pass the token to ``leave_scope``."""
    return _current.set(scope)


def leave_scope(token: contextvars.Token[NodeScope | None]) -> None:
    """Restore the scope that was current before ``enter_scope``."""
    _current.reset(token)
