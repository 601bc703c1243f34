"""Security headers on every response of the service, pages and API alike.

The policy allows nothing by default (``default-src 'none'``): the pages run no script at all,
their one stylesheet is allowed by its hash, forms post only to this server, no page may be
framed (``frame-ancestors 'none'`` and ``X-Frame-Options: DENY``, so a page elsewhere cannot
overlay the Approve button), and no answer may be read as another type than it says, embedded
by another origin, leak the address it came from to another site, or stay in a cache.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SecurityHeaders", "content_security_policy", "security_headers"]

Scope = dict[str, Any]


def content_security_policy(style_hashes: list[str]) -> str:
    """Return the Content-Security-Policy of the service, allowing the stylesheets of ``style_hashes``."""
    styles = " ".join(f"'{digest}'" for digest in style_hashes) or "'none'"
    return f"default-src 'none'; style-src {styles}; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"


def security_headers(policy: str) -> dict[str, str]:
    """Return the security headers of a page or an answer whose Content-Security-Policy is ``policy``."""
    return {
        "Content-Security-Policy": policy,
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        # same-origin: the pages' own form posts keep their Origin and Referer (the CSRF check
        # reads them); links to other sites carry no address of this server.
        "Referrer-Policy": "same-origin",
        "Cross-Origin-Opener-Policy": "same-origin",
        "Cross-Origin-Resource-Policy": "same-origin",
        # Pages show gates' context and the API runs' state: live data, for no cache to keep.
        "Cache-Control": "no-store",
    }


class SecurityHeaders:
    """ASGI middleware that adds the security headers to every HTTP response (refusals included)."""

    def __init__(self, app: Any, policy: str) -> None:
        self.app = app
        self.headers = security_headers(policy)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        # Imported here: the Jupyter server extension reads the policy and headers without Starlette.
        from starlette.datastructures import MutableHeaders

        async def with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in self.headers.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, with_headers)
