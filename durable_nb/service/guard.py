"""The checks every request passes before the app sees it, cheapest and most telling first.

1. ``/api``, ``/mcp`` and ``/metrics``: the bearer token is checked before a byte of the body is read, so an
   unknown caller costs the server nothing however large the body it announces or streams.
2. State-changing requests (POST, PUT, PATCH, DELETE) from a browser page of another origin are
   refused; the pages' own forms must also say where they come from (Origin or Referer).
3. State-changing API requests must be ``application/json``: a page elsewhere can send a
   ``text/plain`` or form POST without asking, but not a JSON one, which needs a CORS preflight
   this server never grants.
4. The body is read here, up to the limit: a larger ``Content-Length`` is refused before
   reading, a body streamed in chunks is counted and refused the moment it passes the limit;
   the app then reads the bytes from memory.
5. A JSON body nested deeper than the parser is asked to go is refused before it is parsed.

A refusal is answered in the service's error shape and changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.datastructures import Headers
from starlette.responses import JSONResponse

from ..errors import DurableError
from .auth import Auth
from .errors import BodyTooLarge, CrossSiteRequest, JsonTooDeep, UnsupportedMediaType, error_body, status_of
from .origins import own_origin, sender

__all__ = ["MAX_BODY", "MAX_JSON_DEPTH", "RequestGuard", "json_too_deep"]

MAX_BODY = 1 << 20  # 1 MiB: far above any run's input or decision, far below what hurts a server
MAX_JSON_DEPTH = 64  # the depth to which run input is stored as JSON (deeper values are pickled)
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_STRUCTURE = re.compile(rb'[\[\]{}"\\]')

Receive = Callable[[], Awaitable[dict[str, Any]]]


class _ClientGone(Exception):
    """The client disconnected before its body was complete: nothing to answer."""


def is_api(path: str) -> bool:
    """Whether ``path`` is the API, MCP's or the metrics' (bearer tokens, JSON), not the pages'."""
    return path.startswith("/api/") or path in ("/mcp", "/metrics") or path.startswith("/mcp/")


def json_too_deep(body: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON text ``body`` opens more than ``limit`` arrays and objects inside each other."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return False  # the usual body: too few brackets to be too deep, decided at C speed
    depth, in_string, escaped_at = 0, False, -1
    for match in _STRUCTURE.finditer(body):
        at = match.start()
        if at == escaped_at:
            continue
        char = body[at : at + 1]
        if in_string:
            if char == b"\\":
                escaped_at = at + 1  # the next byte is escaped: a quote there does not end the string
            elif char == b'"':
                in_string = False
        elif char == b'"':
            in_string = True
        elif char in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        elif char in (b"]", b"}"):
            depth -= 1
    return False


async def _read_body(receive: Receive, declared: str | None, limit: int) -> bytes:
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(f"announces {int(declared):,} bytes", limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_large("streams more", limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _too_large(what: str, limit: int) -> BodyTooLarge:
    return BodyTooLarge(
        f"The request body {what}; this server reads at most {limit:,} bytes (its --max-body). Send less: large "
        "data belongs in the run's state or a file, referred to by name."
    )


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the app the body read already, then waits on the connection as before."""
    given = False

    async def again() -> dict[str, Any]:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


class RequestGuard:
    """ASGI middleware applying the checks above (after the Host allow-list)."""

    def __init__(self, app: Any, auth: Auth, max_body: int = MAX_BODY) -> None:
        self.app = app
        self.auth = auth
        self.max_body = max_body

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        api = is_api(scope["path"])
        try:
            if api:
                self.auth.check(headers.get("authorization"), "read")  # the scope is checked by each endpoint
            if scope["method"] in STATE_CHANGING:
                self._check_origin(scope, headers, required=not api)
                if api and _media_type(headers) != "application/json":
                    raise UnsupportedMediaType(
                        f"{scope['method']} {scope['path']} takes a JSON body: send 'Content-Type: application/json' "
                        f"(the body may be empty), not {headers.get('content-type') or 'no type'!r}."
                    )
            body = await _read_body(receive, headers.get("content-length"), self.max_body)
            if _media_type(headers) == "application/json" and json_too_deep(body):
                raise JsonTooDeep(
                    f"The JSON body nests arrays and objects more than {MAX_JSON_DEPTH} deep; this server reads no "
                    "deeper. Flatten the data."
                )
        except _ClientGone:
            return
        except DurableError as error:
            await JSONResponse(error_body(error), status_code=status_of(error))(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)

    @staticmethod
    def _check_origin(scope: dict[str, Any], headers: Headers, *, required: bool) -> None:
        """Refuse a request a page of another origin sent; with ``required``, also one that names none."""
        said = sender(headers.get("origin"), headers.get("referer"))
        if said is None and not required:
            return  # no browser page sent it (curl, a script, the Python client)
        if said is not None and said == own_origin(scope, headers.get("host", "")):
            return
        where = "names no origin" if said is None else f"comes from {headers.get('origin') or headers.get('referer')!r}"
        raise CrossSiteRequest(
            f"This {scope['method']} {where}, not from this server's own pages; it is refused. Decide gates on "
            "this server's approvals page, or call the API from a script with a bearer token."
        )


def _media_type(headers: Headers) -> str:
    return headers.get("content-type", "").split(";")[0].strip().lower()
