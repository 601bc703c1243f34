"""Agent nodes: a tool-calling loop checkpointed before every model turn and every tool call."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_names

if TYPE_CHECKING:
    from .forks import afork_agent, fork_agent
    from .loop import AgentResult, aagent, agent
    from .models import AnthropicMessages, CallableModel, Model, OpenAIChat
    from .tools import Tool, tool
    from .workers import worker

__all__ = [
    "AgentResult",
    "AnthropicMessages",
    "CallableModel",
    "Model",
    "OpenAIChat",
    "Tool",
    "aagent",
    "afork_agent",
    "agent",
    "fork_agent",
    "tool",
    "worker",
]

# Imported on first use: a notebook cell's commit reaches ``journal`` through this package and
# must not pay for the agent loop, its models and its forks.
_LAZY = {
    "afork_agent": ".forks",
    "fork_agent": ".forks",
    "AgentResult": ".loop",
    "aagent": ".loop",
    "agent": ".loop",
    "AnthropicMessages": ".models",
    "CallableModel": ".models",
    "Model": ".models",
    "OpenAIChat": ".models",
    "Tool": ".tools",
    "tool": ".tools",
    "worker": ".workers",
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY)
