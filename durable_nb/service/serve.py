"""``durable-nb serve``: check the configuration, build the app, listen, say where, run it with uvicorn."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

from ..engine.workflows.workflow import Workflow
from ..errors import ConfigurationError
from .auth import ENV_TOKENS, SCOPES, Auth, Token, is_loopback, load_tokens

__all__ = ["listen", "serve", "serve_mcp"]


def listen(host: str, port: int) -> socket.socket:
    """Return a socket bound to ``host``:``port`` and listening (port 0: any free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family)
    except OSError as error:
        raise ConfigurationError(
            f"Cannot listen on {host} port {port}: {error.strerror or error}. Choose another --port, or stop "
            "what listens there."
        ) from None


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _announce(host: str, port: int, hosts: list[str], open_access: bool) -> None:
    """Print where the server listens, its approvals page and how to sign in, and who may reach it."""
    url = _url(host, port)
    wildcard = host in ("0.0.0.0", "::")
    lines = [
        f"durable-nb serve: listening on {url}" + (" (every address of this machine)" if wildcard else ""),
        f"  approvals page: {url}/"
        + ("" if open_access else " (sign in once with /?token=YOUR_TOKEN; a cookie keeps it)"),
        f"  API: {url}/api/… (OpenAPI document at /openapi.json), MCP at {url}/mcp/",
        f"  answers requests for host {', '.join(hosts)} (add names with --allowed-host)",
    ]
    if open_access:
        lines.append("  no tokens (--no-auth): anyone who can reach this address may read, decide and steer runs")
    print("\n".join(lines), flush=True)


def serve(
    workflows: list[Workflow],
    *,
    store: Any = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    tokens: str | None = None,
    no_auth: bool = False,
    recover_every: float = 30.0,
    notebooks: str | None = None,
    notebook_outputs: str | None = None,
    allowed_host: Sequence[str] = (),
    max_body: int | None = None,
    schedules: Sequence[Any] = (),
    max_notebooks: int | None = None,
) -> None:
    """Serve ``workflows`` and the ``notebooks`` folder until interrupted; refuse to start without tokens
    unless told, on loopback only. Requests must name a loopback host, ``host`` or one of
    ``allowed_host``; bodies are at most ``max_body`` bytes (default 1 MiB). ``schedules`` (each a
    ``Planned``) join the store's schedules, which the server starts when due."""
    try:
        import uvicorn

        from .app import create_app
        from .guard import MAX_BODY
        from .hosts import allowed_hosts
    except ImportError as error:
        raise ConfigurationError("The service needs its extra: pip install 'durable-nb[serve]'.") from error
    if not workflows and notebooks is None:
        raise ConfigurationError("Name what to serve: --workflow module:attribute (repeatable) and/or --notebooks DIR.")
    if notebook_outputs is not None and notebooks is None:
        raise ConfigurationError("--notebook-outputs goes with --notebooks DIR, the folder of notebooks to run.")
    if max_notebooks is not None and notebooks is None:
        raise ConfigurationError("--max-notebooks goes with --notebooks DIR, the folder of notebooks to run.")
    if recover_every <= 0:
        raise ConfigurationError(f"--recover-every takes a number of seconds > 0, not {recover_every}.")
    known = load_tokens(tokens)
    if no_auth and not is_loopback(host):
        raise ConfigurationError(f"--no-auth is only for a loopback address (127.0.0.1, ::1), not {host!r}.")
    if not known and not no_auth:
        raise ConfigurationError(
            f"No tokens: give --tokens FILE or set ${ENV_TOKENS} (name:scope:secret, …), or --no-auth on 127.0.0.1."
        )
    app = create_app(
        workflows,
        store=store,
        auth=Auth(known, open_access=no_auth),
        recover_every=recover_every,
        host=host,
        notebooks=notebooks,
        notebook_outputs=notebook_outputs,
        allowed_host=allowed_host,
        max_body=MAX_BODY if max_body is None else max_body,
        schedules=schedules,
        max_notebooks=max_notebooks,
    )
    # Bound here, not by uvicorn: the line below names the port really listened on, and a port in
    # use is a clean error.
    listening = listen(host, port)
    _announce(host, listening.getsockname()[1], allowed_hosts(host, allowed_host), no_auth)
    config = uvicorn.Config(app, log_level="warning", server_header=False)  # no "server: uvicorn" to fingerprint
    uvicorn.Server(config).run(sockets=[listening])


def serve_mcp(workflows: list[Workflow], *, store: Any = None, scope: str = "read", name: str = "mcp") -> None:
    """Serve the MCP tools over stdio, with ``scope`` for every call (runs proceed in this process)."""
    try:
        from ..store import resolve_store
        from .mcp_tools import build_mcp
        from .operations import Service
    except ImportError as error:  # pragma: no cover - the extra is missing
        raise ConfigurationError("MCP needs its extra: pip install 'durable-nb[serve]'.") from error
    if scope not in SCOPES:
        raise ConfigurationError(f"--scope is one of {', '.join(SCOPES)}, not {scope!r}.")
    resolved = resolve_store(store) if store is not None or not workflows else workflows[0].store
    token = Token(name, scope)
    build_mcp(Service(workflows, resolved), lambda: token).run("stdio")
