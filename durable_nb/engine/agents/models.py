"""The model side of an agent: one request per turn, in the wire format of the client the user has.

A history is kept in the provider's own message format (so it is sent again exactly as the
model saw it) and is plain JSON data (so it is stored as JSON, and runs no code on load).
Adapters exist for the ``openai`` SDK's Chat Completions and the ``anthropic`` SDK's Messages,
sync or async clients alike, and for any callable taking ``(messages, tools)`` and returning a
message in the Chat Completions shape. No SDK is imported here: a client is recognised by its
module.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...errors import AgentFailed, ConfigurationError, InvalidInput
from .tools import Tool

__all__ = ["AnthropicMessages", "CallableModel", "Model", "OpenAIChat", "Reply", "ToolCall", "model_for"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call the model asked for: its id, the tool's name and the arguments as text."""

    id: str
    name: str
    arguments: str

    def parsed(self) -> dict[str, Any]:
        """Return the arguments as a dict; raise ValueError (with a reason for the model) when they are not one."""
        value = json.loads(self.arguments or "{}")
        if not isinstance(value, dict):
            raise ValueError(f"the arguments must be a JSON object, not {type(value).__name__}")
        return value


@dataclass(slots=True)
class Reply:
    """A model's answer: the message to keep in the history, its text and the tool calls it asks for."""

    message: dict[str, Any]
    text: str
    calls: list[ToolCall] = field(default_factory=list)


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class Model:
    """How one provider is asked, and how its replies and tool results are written into a history."""

    provider = "generic"

    def start(self, messages: Any, system: str | None) -> list[dict[str, Any]]:
        """Return the first history: ``messages`` (text is one user message), with ``system`` where it goes."""
        history = [{"role": "user", "content": messages}] if isinstance(messages, str) else _checked_history(messages)
        if system is not None:
            if not isinstance(system, str):
                raise InvalidInput(f"system= takes the system prompt as text, not {type(system).__name__}.")
            history.insert(0, {"role": "system", "content": system})
        return history

    async def ask(self, history: list[dict[str, Any]], tools: list[Tool]) -> Reply:
        """Send the history, return the reply."""
        raise NotImplementedError

    def results(self, answers: list[tuple[ToolCall, str, bool]]) -> list[dict[str, Any]]:
        """Return the messages that hand the tools' results (``(call, text, is_error)``) back to the model."""
        return [{"role": "tool", "tool_call_id": call.id, "content": text} for call, text, _ in answers]


def _checked_history(messages: Any) -> list[dict[str, Any]]:
    """Return a copy of a history given by the caller; refuse anything but a non-empty list of messages."""
    if (
        not isinstance(messages, list | tuple)
        or not messages
        or not all(isinstance(m, Mapping) and isinstance(m.get("role"), str) for m in messages)
    ):
        raise InvalidInput(
            "messages= takes text (the user's message) or the conversation so far: a non-empty list of message "
            f"dicts, each with a 'role' and its 'content'; not {_described(messages)}."
        )
    return [dict(m) for m in messages]


def _described(value: Any) -> str:
    if isinstance(value, list | tuple) and value:
        strays = [m for m in value if not isinstance(m, Mapping) or not isinstance(m.get("role"), str)]
        return f"a list holding {_short_repr(strays[0])}"
    return _short_repr(value)


def _short_repr(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _function_schemas(tools: list[Tool]) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
        for t in tools
    ]


def _chat_reply(message: Mapping[str, Any]) -> Reply:
    """Read a Chat Completions assistant message (a dict)."""
    calls = [
        ToolCall(str(c["id"]), str(c["function"]["name"]), str(c["function"].get("arguments") or "{}"))
        for c in message.get("tool_calls") or []
    ]
    kept: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if calls:
        kept["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls
        ]
    return Reply(kept, str(message.get("content") or ""), calls)


class OpenAIChat(Model):
    """The ``openai`` SDK's Chat Completions (``OpenAI`` or ``AsyncOpenAI``, or a compatible server)."""

    provider = "openai"

    def __init__(self, client: Any, model: str, **options: Any) -> None:
        self.client = client
        self.model = model
        self.options = options

    async def ask(self, history: list[dict[str, Any]], tools: list[Tool]) -> Reply:
        request: dict[str, Any] = {"model": self.model, "messages": history, **self.options}
        if tools:
            request["tools"] = _function_schemas(tools)
        response = await _maybe_await(self.client.chat.completions.create(**request))
        if not response.choices:
            raise AgentFailed(f"The model {self.model!r} answered with no choices.")
        message = response.choices[0].message
        calls = [
            {"id": c.id, "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in (message.tool_calls or [])
        ]
        return _chat_reply({"content": message.content, "tool_calls": calls})


class AnthropicMessages(Model):
    """The ``anthropic`` SDK's Messages (``Anthropic`` or ``AsyncAnthropic``): ``tool_use`` / ``tool_result``."""

    provider = "anthropic"

    def __init__(self, client: Any, model: str, *, max_tokens: int = 1024, **options: Any) -> None:
        self.client = client
        self.model = model
        self.max_tokens = max_tokens
        self.options = options
        self.system: str | None = None

    def start(self, messages: Any, system: str | None) -> list[dict[str, Any]]:
        # Anthropic takes the system prompt beside the messages, not among them.
        self.system = system
        return super().start(messages, None)

    async def ask(self, history: list[dict[str, Any]], tools: list[Tool]) -> Reply:
        request: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": history,
            **self.options,
        }
        if self.system is not None:
            request["system"] = self.system
        if tools:
            request["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools
            ]
        response = await _maybe_await(self.client.messages.create(**request))
        blocks: list[dict[str, Any]] = []
        calls: list[ToolCall] = []
        texts: list[str] = []
        for block in response.content:
            if block.type == "text":
                blocks.append({"type": "text", "text": block.text})
                texts.append(block.text)
            elif block.type == "tool_use":
                blocks.append({"type": "tool_use", "id": block.id, "name": block.name, "input": block.input})
                calls.append(ToolCall(block.id, block.name, json.dumps(block.input)))
            else:
                blocks.append(block.model_dump(mode="json", exclude_none=True))
        return Reply({"role": "assistant", "content": blocks}, "".join(texts), calls)

    def results(self, answers: list[tuple[ToolCall, str, bool]]) -> list[dict[str, Any]]:
        # All results of a turn go back in one user message, one tool_result block per tool_use.
        blocks = []
        for call, text, is_error in answers:
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call.id, "content": text}
            if is_error:
                block["is_error"] = True
            blocks.append(block)
        return [{"role": "user", "content": blocks}] if blocks else []


class CallableModel(Model):
    """Any ``fn(messages, tools)`` (sync or async) returning a Chat Completions style message, or text."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    async def ask(self, history: list[dict[str, Any]], tools: list[Tool]) -> Reply:
        answer = await _maybe_await(self.fn([dict(m) for m in history], _function_schemas(tools)))
        if isinstance(answer, str):
            return Reply({"role": "assistant", "content": answer}, answer)
        if not isinstance(answer, Mapping):
            raise AgentFailed(
                f"The model function returned {type(answer).__name__}; it returns text, or a message dict "
                "{'role': 'assistant', 'content': ..., 'tool_calls': [...]}."
            )
        try:
            return _chat_reply(answer)
        except (KeyError, TypeError) as error:
            raise AgentFailed(
                f"The model function returned a message whose tool calls cannot be read: {error!r}."
            ) from None


def model_for(client: Any, model: str | None, options: dict[str, Any]) -> Model:
    """Return the adapter for ``client``: an OpenAI or Anthropic SDK client, a Model, or a callable."""
    if isinstance(client, Model):
        return client
    module = type(client).__module__ or ""
    if module.startswith("openai") and hasattr(client, "chat"):
        _check_options(client.chat.completions.create, options, "chat.completions")
        return OpenAIChat(client, _need_model(model, "OpenAI"), **options)
    if module.startswith("anthropic") and hasattr(client, "messages"):
        _check_options(client.messages.create, options, "messages")
        return AnthropicMessages(client, _need_model(model, "Anthropic"), **options)
    if callable(client):
        if options:
            raise ConfigurationError(f"Request options {sorted(options)} go to an SDK client, not a model function.")
        return CallableModel(client)
    raise ConfigurationError(
        f"client= takes an openai or anthropic client (sync or async), or a function (messages, tools) -> message; "
        f"not {type(client).__name__}."
    )


def _need_model(model: str | None, provider: str) -> str:
    if not isinstance(model, str) or not model:
        raise ConfigurationError(f"An {provider} client needs model= (the model's name).")
    return model


def _check_options(create: Callable[..., Any], options: Mapping[str, Any], endpoint: str) -> None:
    """Refuse request options the SDK's ``create`` does not take: a misspelt one would fail the first request."""
    if options.get("stream"):
        raise ConfigurationError("The agent reads each reply whole: leave stream= out.")
    try:
        parameters = inspect.signature(create).parameters
    except (TypeError, ValueError):
        return  # a client whose method cannot be inspected: its first request tells
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return
    unknown = sorted(set(options) - set(parameters))
    if unknown:
        raise ConfigurationError(
            f"The client's {endpoint}.create() takes no option {', '.join(map(repr, unknown))}: dnb.agent passes "
            "every keyword it does not know itself to each request. Check the spelling against the SDK."
        )
