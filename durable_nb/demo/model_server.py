"""A scripted model server for demos and tests: the OpenAI Chat Completions and Anthropic Messages wire formats.

Point the real ``openai`` or ``anthropic`` client at it with ``base_url`` to try an agent
without an account, offline, and with the same answers every time. Its script is a function of
the conversation: after ``t`` assistant turns it asks for ``calls_per_turn`` tool calls (ids
``t<t>c<k>``) until ``turns - 1`` turns are done, then answers with text. It refuses (HTTP 400)
a history in which a tool call has no result, as both real APIs do, and counts every request
by turn. A request may carry ``X-Kill-Pid``: when its turn is one to kill at, the server
SIGKILLs that process instead of answering (a crash in the middle of a model call, for tests).
A turn in ``fail_at`` is answered once with that HTTP status instead (an outage; the request
still counts, as a real provider bills it).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["ModelServer", "Script"]


class Script:
    """What the model answers: ``turns`` turns, the last one text, each other one ``calls_per_turn`` tool calls."""

    def __init__(self, turns: int = 3, calls_per_turn: int = 1, tools: tuple[str, ...] = ("lookup",)) -> None:
        self.turns = turns
        self.calls_per_turn = calls_per_turn
        self.tools = tools

    def calls(self, turn: int) -> list[tuple[str, str, dict[str, Any]]]:
        """The tool calls asked for at 0-based ``turn`` (none on the last)."""
        if turn >= self.turns - 1:
            return []
        return [
            (f"t{turn}c{k}", self.tools[(turn + k) % len(self.tools)], {"turn": turn, "k": k})
            for k in range(self.calls_per_turn)
        ]


class ModelServer:
    """The server, in a thread of the test process (it outlives the clients it kills)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: Counter[tuple[str, int]] = Counter()
        self.refused: list[str] = []
        self.kill_at: set[int] = set()
        self.killed: list[int] = []
        self.fail_at: dict[int, int] = {}
        self.lock = threading.Lock()
        self.delay = 0.0
        handler = self._handler()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            # Answers go out at once: Nagle's algorithm would hold the body back for the ACK of the
            # headers, adding 40 ms to every request.
            disable_nagle_algorithm = True
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                if self.path.endswith("/chat/completions"):
                    status, answer = server._openai(body)
                    provider = "openai"
                elif self.path.endswith("/messages"):
                    status, answer = server._anthropic(body)
                    provider = "anthropic"
                else:
                    status, answer, provider = 404, {"error": {"message": "unknown path"}}, "?"
                turn = answer.pop("_turn", -1)
                if status == 200:
                    with server.lock:
                        server.requests[(provider, turn)] += 1
                        doomed = turn in server.kill_at
                        if doomed:
                            server.kill_at.discard(turn)
                        failure = server.fail_at.pop(turn, None)
                    if failure is not None:
                        status = failure
                        answer = {"type": "error", "error": {"type": "api_error", "message": "scripted outage"}}
                    pid = self.headers.get("x-kill-pid")
                    if doomed and pid:
                        server.killed.append(turn)
                        os.kill(int(pid), signal.SIGKILL)
                        return
                    if server.delay:
                        time.sleep(server.delay)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def _refuse(self, reason: str) -> tuple[int, dict[str, Any]]:
        self.refused.append(reason)
        return 400, {"type": "error", "error": {"type": "invalid_request_error", "message": reason}}

    def _openai(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        messages = body["messages"]
        waiting: set[str] = set()
        for message in messages:
            if message["role"] == "assistant":
                if waiting:
                    return self._refuse(f"tool calls without results: {sorted(waiting)}")
                waiting = {c["id"] for c in message.get("tool_calls") or []}
            elif message["role"] == "tool":
                waiting.discard(message["tool_call_id"])
            elif waiting:
                return self._refuse(f"tool calls without results: {sorted(waiting)}")
        if waiting:
            return self._refuse(f"tool calls without results: {sorted(waiting)}")
        turn = sum(1 for m in messages if m["role"] == "assistant")
        calls = self.script.calls(turn)
        message: dict[str, Any] = {"role": "assistant", "content": None if calls else f"done after {turn + 1} turns"}
        if calls:
            message["tool_calls"] = [
                {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for i, n, a in calls
            ]
        return 200, {
            "_turn": turn,
            "id": f"chatcmpl-{turn}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "scripted"),
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }

    def _anthropic(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        messages = body["messages"]
        waiting: set[str] = set()
        for message in messages:
            content = message["content"] if isinstance(message["content"], list) else []
            if message["role"] == "assistant":
                if waiting:
                    return self._refuse(f"tool_use without tool_result: {sorted(waiting)}")
                waiting = {b["id"] for b in content if b.get("type") == "tool_use"}
            else:
                answered = {b["tool_use_id"] for b in content if b.get("type") == "tool_result"}
                if waiting - answered:
                    return self._refuse(f"tool_use without tool_result: {sorted(waiting - answered)}")
                waiting = set()
        turn = sum(1 for m in messages if m["role"] == "assistant")
        calls = self.script.calls(turn)
        content_out: list[dict[str, Any]] = [
            {"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls
        ] or [{"type": "text", "text": f"done after {turn + 1} turns"}]
        return 200, {
            "_turn": turn,
            "id": f"msg_{turn}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "scripted"),
            "content": content_out,
            "stop_reason": "tool_use" if calls else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
