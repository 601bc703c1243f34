"""Clients of the scripted model server for the agent tests (the server is ``durable_nb.demo.model_server``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from durable_nb.demo.model_server import ModelServer, Script

__all__ = ["ModelServer", "Script", "anthropic_client", "openai_client"]


def openai_client(server: ModelServer, asynchronous: bool = False, kill_me: bool = False) -> Any:
    """A real openai client talking to ``server`` (no retries: a refusal must surface)."""
    import openai

    headers = {"x-kill-pid": str(os.getpid())} if kill_me else None
    kind: Callable[..., Any] = openai.AsyncOpenAI if asynchronous else openai.OpenAI
    return kind(base_url=f"{server.url}/v1", api_key="test", max_retries=0, default_headers=headers)


def anthropic_client(server: ModelServer, asynchronous: bool = False, kill_me: bool = False) -> Any:
    """A real anthropic client talking to ``server``."""
    import anthropic

    headers = {"x-kill-pid": str(os.getpid())} if kill_me else None
    kind: Callable[..., Any] = anthropic.AsyncAnthropic if asynchronous else anthropic.Anthropic
    return kind(base_url=server.url, api_key="test", max_retries=0, default_headers=headers)
