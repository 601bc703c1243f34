"""Agent nodes: a tool-calling loop checkpointed before every model turn and every tool call."""

from __future__ import annotations

from .loop import AgentResult, aagent, agent
from .models import AnthropicMessages, CallableModel, Model, OpenAIChat
from .tools import Tool, tool

__all__ = [
    "AgentResult",
    "AnthropicMessages",
    "CallableModel",
    "Model",
    "OpenAIChat",
    "Tool",
    "aagent",
    "agent",
    "tool",
]
