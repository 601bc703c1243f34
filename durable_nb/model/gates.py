"""The records of gates: a gate waiting for a decision, and a decision given at one."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

__all__ = ["Decision", "PendingInterrupt"]


@dataclass(frozen=True, slots=True)
class Decision:
    """A recorded answer to a gate: who decided what, when, and why.

    Attributes:
        approved: True for an approval, False for a rejection.
        value: The JSON value given with the decision (``approve(..., value=…)``), else None.
        comment: Why, as the decider wrote it.
        by: Who decided: a user name, or a service token's name.
        at: When the decision was recorded (UTC).
    """

    approved: bool
    value: Any = None
    comment: str | None = None
    by: str | None = None
    at: datetime = field(default_factory=lambda: datetime.now(UTC))

    def to_json(self) -> dict[str, Any]:
        """Return the JSON form stored in checkpoints."""
        return {
            "approved": self.approved,
            "value": self.value,
            "comment": self.comment,
            "by": self.by,
            "at": self.at.isoformat(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Decision:
        """Rebuild a decision from its stored JSON form."""
        return cls(
            approved=bool(data["approved"]),
            value=data.get("value"),
            comment=data.get("comment"),
            by=data.get("by"),
            at=datetime.fromisoformat(data["at"]),
        )


@dataclass(frozen=True, slots=True)
class PendingInterrupt:
    """A gate waiting for a decision; claimed (deleted) exactly once."""

    run_id: str
    node_id: str
    checkpoint_id: str
    reason: str
    context: Any
    created_at: float
    agent_path: str | None = None
    expires_at: float | None = None
    on_timeout: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """Return what a caller sees of a pending gate: reason, context, node and agent path."""
        return {
            "reason": self.reason,
            "context": self.context,
            "node_id": self.node_id,
            "agent_path": self.agent_path,
        }
