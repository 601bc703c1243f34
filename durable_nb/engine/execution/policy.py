"""How a node or a notebook cell is attempted: retries, the wait between them, a time limit, and
what each failed attempt reports. Workflow nodes and ``%%durable`` cells share this code; only
how an attempt runs (a worker thread, or the kernel's main thread) differs."""

# Annotations evaluated, not strings: the named tuples below keep them as their fields' types.

from collections.abc import Iterator

from ..._tuples import Typed
from ...errors import NodeTimeout
from ...model import EventType, NewEvent, format_seconds

__all__ = ["AttemptPolicy", "Attempts", "backoff_seconds"]


def backoff_seconds(retry: int) -> float:
    """Return the sleep before retry ``retry`` (1-based): 1, 2, 4, 8, 16, 30, 30, … seconds."""
    return float(min(2 ** (retry - 1), 30))


class AttemptPolicy(Typed):
    """Up to ``retries`` more attempts after a failure, each limited to ``timeout_seconds``."""

    retries: int = 0
    timeout_seconds: float | None = None

    def timed_out(self, label: str, node_id: str) -> NodeTimeout:
        """The error of an attempt that overran its time limit."""
        seconds = self.timeout_seconds or 0.0
        return NodeTimeout(
            f"Node '{label}' failed: timed out after {format_seconds(seconds)}",
            node_id=node_id,
            error_type="NodeTimeout",
        )


class Attempts:
    """The attempts of one node: iterate over them, and report each failure to learn whether to retry.

    Every retry adds a ``node_retrying`` event to ``events``, which ride the node's next commit.
    """

    policy: AttemptPolicy
    node_id: str
    events: list[NewEvent]
    item_index: int | None
    made: int

    __slots__ = ("events", "item_index", "made", "node_id", "policy")

    def __init__(
        self,
        policy: AttemptPolicy,
        node_id: str,
        events: list[NewEvent] | None = None,
        item_index: int | None = None,
        made: int = 0,
    ) -> None:
        self.policy = policy
        self.node_id = node_id
        self.events = [] if events is None else events
        self.item_index = item_index
        self.made = made

    def __iter__(self) -> Iterator[int]:
        for attempt in range(1, self.policy.retries + 2):
            self.made = attempt
            yield attempt

    def failed(self, error: BaseException) -> float | None:
        """Record that the current attempt failed; return the seconds to wait before the next, or None when
        none is left."""
        if self.made > self.policy.retries:
            return None
        detail: dict[str, object] = {"attempt": self.made, "error": f"{type(error).__name__}: {error}"}
        if self.item_index is not None:
            detail["item_index"] = self.item_index
        self.events.append(NewEvent(EventType.NODE_RETRYING, self.node_id, detail))
        return backoff_seconds(self.made)
