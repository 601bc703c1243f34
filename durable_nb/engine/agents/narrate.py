"""What an agent tells a notebook cell's output while it runs: each turn, each call and its result."""

from __future__ import annotations

import json
from typing import Any

from .models import ToolCall

__all__ = ["Narrator", "calls_of"]


class Narrator:
    """Tells an observer (a notebook cell's output) each turn as it happens, and what was replayed."""

    def __init__(self, path: str, observer: Any) -> None:
        self.path = path
        self.observer = observer

    def _say(self, text: str) -> None:
        if self.observer is not None:
            self.observer(f"{self.path} {text}")

    def replayed(self, history: list[dict[str, Any]], turn: int) -> None:
        if self.observer is None:
            return
        done = [m for m in history if m.get("role") == "assistant"]
        self._say(f"continues at turn {turn}: {len(done)} answered turn(s) restored from the store, not asked again")
        for number, message in enumerate(done, start=1):
            calls = calls_of(message)
            self.reply(number, _text_of(message), calls, stored=True)

    def reply(self, turn: int, text: str, calls: list[ToolCall], stored: bool = False) -> None:
        mark = " (stored)" if stored else ""
        if text:
            self._say(f"turn {turn}{mark}: {_short(text)}")
        for call in calls:
            self._say(f"turn {turn}{mark} → {call.name}({_short(call.arguments)})")

    def result(self, turn: int, call: ToolCall, text: str, is_error: bool) -> None:
        self._say(f"turn {turn} ← {call.name}{' failed' if is_error else ''}: {_short(text)}")


def _short(text: str, limit: int = 200) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return str(content or "")


def calls_of(message: dict[str, Any]) -> list[ToolCall]:
    """Read the tool calls of a stored assistant message (either provider's shape)."""
    content = message.get("content")
    if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_use" for b in content):
        return [
            ToolCall(str(b["id"]), str(b["name"]), json.dumps(b.get("input") or {}))
            for b in content
            if isinstance(b, dict) and b.get("type") == "tool_use"
        ]
    return [
        ToolCall(str(c["id"]), str(c["function"]["name"]), str(c["function"].get("arguments") or "{}"))
        for c in message.get("tool_calls") or []
    ]
