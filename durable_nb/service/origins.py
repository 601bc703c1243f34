"""Where a request comes from: its ``Origin`` (or ``Referer``) against the server's own origin.

A browser names the page that sends a request in ``Origin`` (and, under the pages' Referrer
Policy, in ``Referer``); a script or ``curl`` names none. The server's own origin is the scheme
and the Host the request was sent to; the Host is checked against the allow-list before, so a
page elsewhere cannot make it its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

__all__ = ["Origin", "own_origin", "sender"]

Origin = tuple[str, str, int]
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _parse(url: str) -> Origin | None:
    try:
        parts = urlsplit(url)
        scheme, host, port = parts.scheme.lower(), parts.hostname, parts.port
    except ValueError:  # a port that is no number, a malformed address
        return None
    if scheme not in _DEFAULT_PORTS or not host:
        return None
    return scheme, host, port if port is not None else _DEFAULT_PORTS[scheme]


def own_origin(scope: Mapping[str, Any], host: str) -> Origin | None:
    """The origin a request was sent to: its scheme and ``host`` (the Host header)."""
    return _parse(f"{scope.get('scheme', 'http')}://{host}")


def sender(origin: str | None, referer: str | None) -> Origin | bool | None:
    """The origin a request says it comes from: from ``Origin``, else from ``Referer``; ``False`` when a
    header is there but names no origin (``Origin: null``, a malformed address); None when neither is."""
    for header in (origin, referer):
        if header:
            return _parse(header) or False
    return None
