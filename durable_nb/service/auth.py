"""Who may call the service: bearer tokens, each with a name (recorded as a decision's ``by``) and a scope.

Scopes grow: ``read`` sees runs; ``decide`` also approves and rejects gates; ``admin`` also
starts, resumes, cancels and forks runs. Tokens come from a file (one ``name scope secret`` per
line; ``#`` starts a comment) or from ``$DURABLE_NB_TOKENS`` (``name:scope:secret`` separated by
commas). Secrets are compared as SHA-256 digests in constant time and never kept in clear.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigurationError, DurableError

__all__ = ["ENV_TOKENS", "SCOPES", "Auth", "Forbidden", "Token", "Unauthorized", "is_loopback", "load_tokens"]

ENV_TOKENS = "DURABLE_NB_TOKENS"
SCOPES = ("read", "decide", "admin")
_MIN_SECRET = 16


class Unauthorized(DurableError):
    """No token, or one the service does not know (HTTP 401)."""


class Forbidden(DurableError):
    """A known token whose scope does not allow the call (HTTP 403)."""


@dataclass(frozen=True, slots=True)
class Token:
    """A caller: its name and what it may do."""

    name: str
    scope: str

    def allows(self, needed: str) -> bool:
        """Whether this token's scope includes ``needed``."""
        return SCOPES.index(self.scope) >= SCOPES.index(needed)


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8")).digest()


def _parse(entries: list[tuple[str, str, str]], where: str) -> dict[bytes, Token]:
    tokens: dict[bytes, Token] = {}
    for name, scope, secret in entries:
        if scope not in SCOPES:
            raise ConfigurationError(f"Token {name!r} in {where} has scope {scope!r}; use one of {', '.join(SCOPES)}.")
        if len(secret) < _MIN_SECRET:
            raise ConfigurationError(
                f"Token {name!r} in {where} is shorter than {_MIN_SECRET} characters; make it long and random "
                "(python -c 'import secrets; print(secrets.token_urlsafe(32))')."
            )
        tokens[_digest(secret)] = Token(name, scope)
    return tokens


def load_tokens(
    path: str | os.PathLike[str] | None = None, environ: dict[str, str] | None = None
) -> dict[bytes, Token]:
    """Return the tokens of ``path`` and of ``$DURABLE_NB_TOKENS``, by the digest of their secret."""
    env = os.environ if environ is None else environ
    entries: list[tuple[str, str, str]] = []
    tokens: dict[bytes, Token] = {}
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as error:
            raise ConfigurationError(f"Cannot read the token file {path}: {error.strerror or error}.") from error
        for number, line in enumerate(text.splitlines(), start=1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 3:
                raise ConfigurationError(f"{path}, line {number}: write 'name scope secret', not {line[:40]!r}.")
            entries.append((parts[0], parts[1], parts[2]))
        tokens.update(_parse(entries, str(path)))
    listed = env.get(ENV_TOKENS, "")
    if listed.strip():
        found = []
        for item in listed.split(","):
            parts = item.strip().split(":", 2)
            if len(parts) != 3:
                raise ConfigurationError(f"${ENV_TOKENS} lists name:scope:secret entries, not {item.strip()[:40]!r}.")
            found.append((parts[0], parts[1], parts[2]))
        tokens.update(_parse(found, f"${ENV_TOKENS}"))
    return tokens


def is_loopback(host: str) -> bool:
    """Whether ``host`` is only reachable from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Auth:
    """Checks a request's bearer token against the tokens (or lets everyone in, when told to)."""

    def __init__(self, tokens: dict[bytes, Token], *, open_access: bool = False) -> None:
        self.tokens = tokens
        self.open_access = open_access

    def check(self, authorization: str | None, needed: str) -> Token:
        """Return the caller for an ``Authorization`` header; raise Unauthorized or Forbidden."""
        if self.open_access:
            return Token("anonymous", "admin")
        scheme, _, secret = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            raise Unauthorized("This service needs a bearer token: send 'Authorization: Bearer <token>'.")
        digest = _digest(secret.strip())
        found = next((t for d, t in self.tokens.items() if hmac.compare_digest(d, digest)), None)
        if found is None:
            raise Unauthorized("The bearer token is not one this service knows.")
        if not found.allows(needed):
            raise Forbidden(f"Token {found.name!r} has scope {found.scope!r}; this call needs {needed!r}.")
        return found
