"""Tools an agent may call: plain functions, described to the model by a JSON schema.

The schema comes from the function's type hints and docstring (the first paragraph describes
the tool; ``Args:`` lines describe its parameters), or is given explicitly with ``@dnb.tool``.
"""

from __future__ import annotations

import enum
import inspect
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...errors import ConfigurationError

__all__ = ["Tool", "as_tools", "schema_of", "tool"]

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean"}


@dataclass(frozen=True, slots=True)
class Tool:
    """A function the model may call, with the name and JSON schema it is shown under."""

    fn: Callable[..., Any]
    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)
    # An agent called as a tool (a supervisor's worker): see ``worker``.
    worker: bool = False

    @property
    def is_async(self) -> bool:
        """Whether calling it returns an awaitable."""
        return inspect.iscoroutinefunction(self.fn)


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    parameters: Mapping[str, Any] | None = None,
) -> Any:
    """Describe a function as a tool (its name, description or JSON schema); usable bare or with arguments.

    A plain function needs no decorator: its name, docstring and type hints describe it. Use this
    one to show the model another name, description or schema.

    Args:
        fn: The function, sync or async (given when used as ``@dnb.tool`` without arguments).
        name: The name the model calls it by (default: the function's).
        description: What the model is told it does (default: the docstring's first paragraph).
        parameters: A JSON schema of its arguments (default: built from the type hints).

    Returns:
        A Tool (or a decorator that makes one).
    """

    def describe(function: Callable[..., Any]) -> Tool:
        if not callable(function):
            raise ConfigurationError(f"A tool is a function, not {function!r}.")
        tool_name = name or getattr(function, "__name__", "")
        if not isinstance(tool_name, str) or not NAME.match(tool_name):
            raise ConfigurationError(
                f"A tool's name is 1 to 64 letters, digits, '_' or '-' (what the model APIs accept), not {tool_name!r}."
            )
        summary, documented = _docstring(function)
        schema = dict(parameters) if parameters is not None else schema_of(function, documented)
        if schema.get("type") != "object":
            raise ConfigurationError(f"Tool {tool_name!r}: parameters must be a JSON schema of type 'object'.")
        return Tool(function, tool_name, description if description is not None else summary, schema)

    return describe(fn) if fn is not None else describe


def as_tools(tools: Iterable[Any] | None) -> dict[str, Tool]:
    """Return the tools by name, described from plain functions where needed; refuse two of one name."""
    found: dict[str, Tool] = {}
    if tools is None:
        return found
    if isinstance(tools, Tool) or callable(tools):
        label = getattr(tools, "name", None) or getattr(tools, "__name__", "the_tool")
        raise ConfigurationError(f"tools= takes a list of functions, not one function: pass tools=[{label}].")
    if isinstance(tools, Mapping | str | bytes) or not isinstance(tools, Iterable):
        raise ConfigurationError(
            f"tools= takes a list of functions (or @dnb.tool ones), not {type(tools).__name__} {tools!r:.80}."
        )
    for item in tools:
        described = item if isinstance(item, Tool) else tool(item)
        if described.name in found:
            raise ConfigurationError(f"Two tools are named {described.name!r}; give one another name with @dnb.tool.")
        found[described.name] = described
    return found


def _docstring(function: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """Return a docstring's first paragraph and the descriptions of its ``Args:`` lines."""
    text = inspect.getdoc(function) or ""
    paragraphs = text.split("\n\n")
    summary = " ".join(paragraphs[0].split()) if paragraphs and paragraphs[0] else ""
    described: dict[str, str] = {}
    in_args = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.rstrip(":").lower() in ("args", "arguments", "parameters"):
            in_args = True
            continue
        if in_args:
            match = re.match(r"^(\w+)\s*(?:\([^)]*\))?\s*:\s*(.+)$", stripped)
            if match:
                described[match.group(1)] = match.group(2)
            elif stripped and not line.startswith((" ", "\t")):
                in_args = False
    return summary, described


def schema_of(function: Callable[..., Any], described: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Return the JSON schema of a function's parameters, from its type hints."""
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # noqa: BLE001 - hints that cannot be resolved: the parameters are untyped
        hints = {}
    properties: dict[str, Any] = {}
    required: list[str] = []
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        prop = _json_type(hints.get(parameter.name, Any))
        if described and parameter.name in described:
            prop["description"] = described[parameter.name]
        properties[parameter.name] = prop
        if parameter.default is parameter.empty:
            required.append(parameter.name)
    return {"type": "object", "properties": properties, "required": required}


def _json_type(hint: Any) -> dict[str, Any]:
    """Return the JSON schema of one type hint (unknown types accept anything)."""
    if hint in _SIMPLE:
        return {"type": _SIMPLE[hint]}
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in arguments if a is not type(None)]
        if len(options) == 1:
            return _json_type(options[0])
        return {"anyOf": [_json_type(a) for a in options]}
    if origin is typing.Literal:
        return {"enum": list(arguments)}
    if hint in (list, tuple, set) or origin in (list, tuple, set, frozenset, Iterable):
        return {"type": "array", "items": _json_type(arguments[0]) if arguments else {}}
    if hint is dict or origin in (dict, Mapping):
        return {"type": "object"}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [member.value for member in hint]}
    return {}
