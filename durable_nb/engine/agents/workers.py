"""Agents that call agents: a worker is an agent offered to a supervisor agent as one of its tools.

The supervisor's path becomes ``supervisor:<s>``; a worker's checkpoints go under
``supervisor:<s>/worker:<w>`` (its tools' under ``…/worker:<w>/tool:<t>``), so a crash inside a
worker repeats only the worker's call in flight, and resuming can be scoped to a subtree by
its path prefix. Each time the supervisor calls a worker the worker starts afresh; the call id
the model gave tells its checkpoints from an earlier call's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...errors import ConfigurationError
from .arguments import AgentCall
from .loop import aagent
from .tools import NAME, Tool

__all__ = ["worker"]


def worker(
    client: Any,
    tools: Iterable[Any] = (),
    *,
    name: str,
    description: str,
    model: str | None = None,
    system: str | None = None,
    max_turns: int = 20,
    **options: Any,
) -> Tool:
    """Return an agent as a tool for another agent: the supervisor sends it a task, it answers with text.

    Each call of the worker starts it afresh; its checkpoints are under
    ``supervisor:<s>/worker:<name>``, so a crash inside it repeats only its call in flight.

    Args:
        client: The worker's model client (as for :func:`agent`).
        tools: The worker's own tools.
        name: Its name as a tool: 1 to 64 letters, digits, ``_`` or ``-``.
        description: What the supervisor is told it does.
        model: The worker's model.
        system: The worker's system prompt.
        max_turns: The worker's turn limit.
        **options: Sent with each of the worker's requests.

    Returns:
        A Tool to pass to the supervisor's ``dnb.agent(..., tools=[...])``.

    Raises:
        ConfigurationError: The name or description is not usable.
    """
    if not isinstance(name, str) or not NAME.match(name):
        raise ConfigurationError(f"A worker's name is 1 to 64 letters, digits, '_' or '-', not {name!r}.")
    if not isinstance(description, str) or not description:
        raise ConfigurationError("A worker needs description=: the supervisor's model reads it to choose.")
    # Checked now, not when the supervisor's model first calls it (its errors would go to that model).
    checked = AgentCall(client, "a task", tools, model, name, system, max_turns, options).checked()
    own_tools = list(checked.tools.values())

    async def run(task: str) -> str:
        result = await aagent(
            client, task, own_tools, model=model, name=name, system=system, max_turns=max_turns, **options
        )
        return result.text

    parameters = {
        "type": "object",
        "properties": {"task": {"type": "string", "description": f"what {name} should do"}},
        "required": ["task"],
    }
    return Tool(run, name, description, parameters, worker=True)
