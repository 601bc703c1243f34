"""Which ``Host`` a request may name: the allow-list that stops DNS rebinding.

A web page can make a browser resolve its own name to 127.0.0.1 and send requests to a server
on this machine; such a request still names the page's host in ``Host``. Answering only the
names this server is known by (loopback names, the address it binds, and ``--allowed-host``)
refuses them, with or without tokens. Starlette's TrustedHostMiddleware decides; a refusal is
answered in the service's error shape.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from typing import Any

from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.responses import JSONResponse

from ..errors import ConfigurationError
from .errors import HostNotAllowed, error_body

__all__ = ["LOOPBACK_NAMES", "AllowedHosts", "allowed_hosts"]

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
WILDCARD_ADDRESSES = ("0.0.0.0", "::", "")
_NAME = re.compile(r"[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?")


def _as_host(name: str) -> str:
    """A name as the Host header carries it: lower case, an IPv6 address in brackets."""
    name = name.strip().lower()
    try:
        if ipaddress.ip_address(name.strip("[]")).version == 6:
            return f"[{name.strip('[]')}]"
    except ValueError:
        pass
    return name


def _check_pattern(name: str) -> str:
    host = _as_host(name)
    if host.startswith("[") or _NAME.fullmatch(host.removeprefix("*.")):
        return host
    raise ConfigurationError(
        f"--allowed-host takes a host name (api.example.com), an address (10.0.0.5, ::1) or a pattern like "
        f"*.example.com, without scheme, port or '*' alone (which would answer any host); not {name!r}."
    )


def allowed_hosts(bind: str, extra: Iterable[str] = ()) -> list[str]:
    """Return the names a request's Host may carry: loopback names, ``bind`` unless it is a wildcard
    address, and ``extra`` (names, addresses or ``*.domain`` patterns)."""
    names = list(LOOPBACK_NAMES)
    if bind not in WILDCARD_ADDRESSES:
        names.append(_as_host(bind))
    names += [_check_pattern(name) for name in extra]
    return list(dict.fromkeys(names))


class AllowedHosts:
    """ASGI middleware: a request whose Host is not allowed is answered 400 HostNotAllowed, unread."""

    def __init__(self, app: Any, hosts: list[str]) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def through(scope: dict[str, Any], receive: Any, _: Any) -> None:
            await self.app(scope, receive, send)

        async def refusal(message: dict[str, Any]) -> None:
            # Only TrustedHostMiddleware's own answer comes here: the app writes to ``send``.
            if message["type"] == "http.response.start":
                host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
                # The allowed names are not listed: a stranger probing hosts learns nothing from the refusal.
                error = HostNotAllowed(
                    f"This server does not answer for host {host[:100]!r}. Use the name it is served under, or "
                    "start it with --allowed-host NAME to add one."
                )
                await JSONResponse(error_body(error), status_code=400)(scope, receive, send)

        await TrustedHostMiddleware(through, allowed_hosts=self.hosts, www_redirect=False)(scope, receive, refusal)
