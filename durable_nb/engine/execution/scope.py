"""The node scope: which run and node the current code runs in (a context variable)."""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING, Any

from ...store.protocol import Store

if TYPE_CHECKING:
    from ...model import Decision

__all__ = ["NodeScope", "current_scope", "enter_scope"]


class NodeScope:
    """What gate(), interrupt() and @idempotent need to know about the running node."""

    run_id: str
    node_id: str
    store: Store
    secret: bytes
    decisions: list[Decision]
    agent_path: str | None
    gate_calls: int
    # Where an agent in this node writes its checkpoints (the node's runner), and its map item.
    steps: Any
    item_index: int | None
    # How many agents of each path this execution of the node has started (a second one is '#2').
    agent_calls: dict[str, int]
    # While a supervisor's worker runs: the supervisor's call id that started it.
    invocation: str | None
    # On an executor's worker: the @idempotent results the owner shipped, and the new ones.
    remote: Any
    # The checkpoint the run continued from (a decision's, when one resumed it): named by gate events.
    resumed_from: str | None

    __slots__ = (
        "agent_calls",
        "agent_path",
        "decisions",
        "gate_calls",
        "invocation",
        "item_index",
        "node_id",
        "remote",
        "resumed_from",
        "run_id",
        "secret",
        "steps",
        "store",
    )

    def __init__(
        self,
        run_id: str,
        node_id: str,
        store: Store,
        secret: bytes,
        decisions: list[Decision] | None = None,
        agent_path: str | None = None,
        gate_calls: int = 0,
        steps: Any = None,
        item_index: int | None = None,
        agent_calls: dict[str, int] | None = None,
        invocation: str | None = None,
        remote: Any = None,
        resumed_from: str | None = None,
    ) -> None:
        self.run_id = run_id
        self.node_id = node_id
        self.store = store
        self.secret = secret
        self.decisions = [] if decisions is None else decisions
        self.agent_path = agent_path
        self.gate_calls = gate_calls
        self.steps = steps
        self.item_index = item_index
        self.agent_calls = {} if agent_calls is None else agent_calls
        self.invocation = invocation
        self.remote = remote
        self.resumed_from = resumed_from


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
