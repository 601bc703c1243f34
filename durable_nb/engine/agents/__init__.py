"""Agent nodes: a tool-calling loop checkpointed before every model turn and every tool call."""

from __future__ import annotations

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
