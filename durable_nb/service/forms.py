"""The approvals page's forms: a CSRF token per session, and a decision read strictly from the form.

A page of another origin on the same host (another port, a subdomain) is "same-site": the
browser sends it the session cookie even under SameSite=Strict. What it cannot do is read this
server's page, so it cannot know the token the page's forms carry: an HMAC-SHA256 of the
session's credential under a key only the servers hold, compared in constant time. A cookie
another page planted is no help either: without the key it has no token.

The key is derived from the store's signing key, which every server of one store shares: a
form one server showed is accepted by another behind the same proxy, and after a restart.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from urllib.parse import parse_qs

from ..errors import InvalidDecision
from .errors import CrossSiteRequest, UnsupportedMediaType

__all__ = ["FORM_TYPE", "CsrfTokens", "PageDecision", "forms_key", "page_decision", "read_form"]

FORM_TYPE = "application/x-www-form-urlencoded"


_PURPOSE = b"durable_nb approvals page form tokens"


def forms_key(secret: bytes) -> bytes:
    """Return the key of the page's form tokens, derived from the signing key (never the key itself)."""
    return hmac.new(secret, _PURPOSE, hashlib.sha256).digest()


class CsrfTokens:
    """Issues and checks the CSRF tokens of sessions, under a key the servers of one store share."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key if key is not None else secrets.token_bytes(32)

    def issue(self, session: str) -> str:
        """Return the token of the session whose credential (the cookie, or the bearer secret) is ``session``."""
        return hmac.new(self._key, session.encode("utf-8"), hashlib.sha256).hexdigest()

    def check(self, session: str | None, token: str | None) -> None:
        """Raise CrossSiteRequest unless ``token`` is the session's."""
        if not session or not token or not hmac.compare_digest(self.issue(session), token):
            raise CrossSiteRequest(
                "This form does not carry this session's token: it was not sent from this server's approvals "
                "page, or the servers' signing key changed since. Open the page again and decide there."
            )


@dataclass(frozen=True, slots=True)
class PageDecision:
    """What a form of the approvals page asks: approve or reject a node's gate, with a comment."""

    approved: bool
    comment: str | None
    node: str | None


def read_form(content_type: str | None, body: bytes) -> dict[str, str]:
    """Return a page form's fields (each sent once); raise UnsupportedMediaType or InvalidDecision."""
    if (content_type or "").split(";")[0].strip().lower() != FORM_TYPE:
        raise UnsupportedMediaType(f"The approvals page posts {FORM_TYPE}, not {content_type or 'no type'!r}.")
    try:
        form = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=20)
    except (UnicodeDecodeError, ValueError) as error:
        raise InvalidDecision(f"The form cannot be read ({error}); decide from the approvals page.") from None
    repeated = sorted(name for name, values in form.items() if len(values) > 1)
    if repeated:
        raise InvalidDecision(f"The form sends {repeated} more than once; send each field once.")
    return {name: values[0] for name, values in form.items()}


def page_decision(form: dict[str, str]) -> PageDecision:
    """Return the decision a form asks for; raise InvalidDecision unless ``approved`` is 'true' or 'false'."""
    approved = form.get("approved")
    if approved not in ("true", "false"):
        # A form without its button's value must never count as an approval.
        raise InvalidDecision(f"approved must be 'true' or 'false', not {approved!r}; nothing was decided.")
    return PageDecision(approved == "true", form.get("comment", "").strip() or None, form.get("node") or None)
