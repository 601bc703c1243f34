"""Human gates and interrupts: pause a node durably until someone decides.

A node that calls ``gate()`` or ``interrupt()`` for the first time is stopped by
``Suspend``; the engine commits the pause. When the decision is recorded, the node
runs again from its top, and the same call returns the recorded decision instead.
"""

from __future__ import annotations

import json
import math
import reprlib
from typing import TYPE_CHECKING, Any

from ..._lazy import lazy_names
from ...errors import InvalidInput, NoActiveNode
from ..execution.scope import NodeScope, current_scope
from ..tracing import GATE, event

if TYPE_CHECKING:
    from ...model import Decision, PendingInterrupt

__all__ = ["ON_TIMEOUT", "Suspend", "freeze_context", "gate", "interrupt"]

# Resume answers an interrupt from outside the node (a workflow's resume): a kernel running cells
# never defines it. Its old path still resolves.
__getattr__, __dir__ = lazy_names(__name__, {"Resume": "durable_nb.engine.gates.resume"})

ON_TIMEOUT = ("reject", "fail")
_MAX_REPR = 2000
_SHORT_REPR = reprlib.Repr()
_SHORT_REPR.maxlevel = 8
_SHORT_REPR.maxstring = _SHORT_REPR.maxother = _MAX_REPR
_SHORT_REPR.maxlong = 200


class Suspend(BaseException):
    """Raised inside a node to pause the run; a BaseException so that ``except Exception`` in
    user code cannot swallow the pause."""

    def __init__(
        self,
        reason: str,
        context: Any,
        timeout_seconds: float | None,
        on_timeout: str,
        kind: str,
        agent_path: str | None = None,
    ) -> None:
        super().__init__(reason)
        self.agent_path = agent_path
        self.reason = reason
        self.context = context
        self.timeout_seconds = timeout_seconds
        self.on_timeout = on_timeout
        self.kind = kind

    def detail(self, node_id: str) -> dict[str, Any]:
        """Return the gate as its checkpoint records it."""
        return {
            "reason": self.reason,
            "context": self.context,
            "node_id": node_id,
            "agent_path": self.agent_path,
            "kind": self.kind,
            "timeout_seconds": self.timeout_seconds,
            "on_timeout": self.on_timeout,
        }

    def pending(self, run_id: str, node_id: str, checkpoint_id: str, now: float) -> PendingInterrupt:
        """Return the gate's row in the pending interrupts, opened ``now`` by ``checkpoint_id``."""
        from ...model import PendingInterrupt

        return PendingInterrupt(
            run_id=run_id,
            node_id=node_id,
            checkpoint_id=checkpoint_id,
            reason=self.reason,
            context=self.context,
            created_at=now,
            expires_at=None if self.timeout_seconds is None else now + self.timeout_seconds,
            on_timeout=self.on_timeout,
            agent_path=self.agent_path,
        )


def _fallback(value: Any) -> str:
    # reprlib bounds the depth and the length, so a huge or deeply nested value costs little.
    text = _SHORT_REPR.repr(value)
    return text if len(text) <= _MAX_REPR else text[: _MAX_REPR - 1] + "…"


def freeze_context(context: Any) -> Any:
    """Return a JSON copy of ``context``; values JSON cannot hold become their repr."""
    try:
        text = json.dumps(context, default=_fallback, allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        # NaN, infinity, a reference cycle, keys that are not text, or nesting too deep for
        # JSON: keep the whole value's (bounded) repr.
        text = json.dumps(_fallback(context))
    return json.loads(text)


def _scope_or_raise(what: str) -> NodeScope:
    scope = current_scope()
    if scope is None:
        raise NoActiveNode(
            f"{what} was called outside a durable node. Call it inside a Workflow node "
            "function or a %%durable cell, where the pause can be recorded."
        )
    return scope


def _check_timeout(timeout_seconds: float | None, on_timeout: str) -> None:
    if timeout_seconds is not None:
        if (
            not isinstance(timeout_seconds, (int, float))
            or isinstance(timeout_seconds, bool)
            or math.isnan(timeout_seconds)
        ):
            raise InvalidInput(f"timeout_seconds must be a number of seconds, not {timeout_seconds!r}")
        if timeout_seconds < 1:
            raise InvalidInput(
                f"timeout_seconds={timeout_seconds} is below the 1 second floor of a gate; "
                "use 1 or more (there is no ceiling)."
            )
    if on_timeout not in ON_TIMEOUT:
        raise InvalidInput(f"on_timeout must be 'reject' or 'fail', not {on_timeout!r}")


def _answer(reason: str, context: Any, timeout_seconds: float | None, on_timeout: str, kind: str) -> Decision:
    if not isinstance(reason, str) or not reason:
        raise InvalidInput(f"A gate needs a non-empty name, not {reason!r}")
    _check_timeout(timeout_seconds, on_timeout)
    if timeout_seconds is not None and math.isinf(timeout_seconds):
        timeout_seconds = None  # no ceiling: an infinite wait is no deadline at all
    scope = _scope_or_raise(f"{kind}({reason!r})")
    index = scope.gate_calls
    scope.gate_calls += 1
    if index < len(scope.decisions):
        decision = scope.decisions[index]
        event(None, GATE, scope.run_id, scope.resumed_from, reason=reason, state="resumed", approved=decision.approved)
        return decision
    raise Suspend(reason, freeze_context(context), timeout_seconds, on_timeout, kind, scope.agent_path)


def interrupt(
    reason: str,
    context: Any = None,
    *,
    timeout_seconds: float | None = None,
    on_timeout: str = "reject",
) -> Any:
    """Pause the run until a value is supplied (``Resume(value)``), then return that value.

    The lower-level form of :func:`gate`: the answer is any JSON value rather than a decision.
    Takes the arguments of :func:`gate` (``reason`` is its name) and raises the same errors.

    Example:
        >>> by_hand = dnb.Workflow("sort-by-hand")
        >>> @by_hand.node()
        ... def pick(state):
        ...     return {"category": dnb.interrupt("pick a category", {"choices": ["billing", "bug"]})}
        >>> paused = by_hand.run({})
        >>> by_hand.resume(paused.id, dnb.Resume("billing")).state["category"]  # from any process
        'billing'
    """
    return _answer(reason, context, timeout_seconds, on_timeout, "interrupt").value


def gate(
    name: str,
    context: Any = None,
    *,
    timeout_seconds: float | None = None,
    on_timeout: str = "reject",
) -> Decision:
    """Pause the run for a person's approval and return their Decision once it is recorded.

    Call it inside a workflow node, an agent's tool or a ``%%durable`` cell. The first time, it
    commits the gate's checkpoint, the pending gate and the ``paused`` status in one transaction
    and stops the node (nothing after it runs). Once a decision is recorded (``dnb.approve``,
    ``flow.approve``, the panel, the command line, the service), the node runs again from its top
    and this call returns the decision.

    Args:
        name: What is asked; shown to the person and recorded with the gate.
        context: JSON-serializable facts frozen with the gate (what the person decides on).
        timeout_seconds: How long the gate may wait (at least 1 s; default: for ever).
        on_timeout: ``"reject"`` (the gate returns a rejection) or ``"fail"`` (the run fails) once
            the deadline passed; applied by whoever next looks at the run.

    Returns:
        The recorded decision, with ``approved``, ``value``, ``comment``, ``by`` and ``at``.

    Raises:
        NoActiveNode: Called outside a durable node, tool or cell.
        ConfigurationError: Called inside a map item (put the gate in a node of its own).

    Example:
        >>> @flow.node(after="draft")
        ... def review(state):
        ...     decision = dnb.gate("send it?", {"draft": state["draft"]})
        ...     return {"approved": decision.approved}
    """
    return _answer(name, context, timeout_seconds, on_timeout, "gate")
