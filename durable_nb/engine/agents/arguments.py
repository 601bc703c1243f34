"""What ``dnb.agent`` was asked to do, checked before anything runs or is stored.

A bad argument is refused here, with what to pass instead, before a model is asked or a run is
created: an agent run on its own leaves no run behind for a call that could never have worked.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ...errors import ConfigurationError
from .models import Model, model_for
from .tools import Tool, as_tools

__all__ = ["AgentCall", "Checked"]


@dataclass(frozen=True, slots=True)
class Checked:
    """An agent's arguments once accepted: the model adapter and the tools by name."""

    model: Model
    tools: dict[str, Tool]


@dataclass(frozen=True, slots=True)
class AgentCall:
    """The arguments of one ``dnb.agent`` call that the loop runs with."""

    client: Any
    messages: Any
    tools: Iterable[Any] | None = ()
    model: str | None = None
    name: str = "agent"
    system: str | None = None
    max_turns: int = 20
    options: dict[str, Any] = field(default_factory=dict)

    def checked(self) -> Checked:
        """Return the model adapter and the tools; raise a typed error naming the first bad argument."""
        if not isinstance(self.name, str) or not self.name or "/" in self.name:
            raise ConfigurationError(f"An agent's name is non-empty text without '/', not {self.name!r}.")
        if not isinstance(self.max_turns, int) or isinstance(self.max_turns, bool) or self.max_turns < 1:
            raise ConfigurationError(f"max_turns must be a whole number >= 1, not {self.max_turns!r}.")
        tools = as_tools(self.tools)
        model = model_for(self.client, self.model, self.options)
        model.start(self.messages, self.system)  # refuses a malformed history or system prompt
        return Checked(model, tools)
