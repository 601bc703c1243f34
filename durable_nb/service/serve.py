"""``durable-nb serve``: check the configuration, build the app, run it with uvicorn."""

from __future__ import annotations

from typing import Any

from ..engine.workflow import Workflow
from ..errors import ConfigurationError
from .auth import ENV_TOKENS, SCOPES, Auth, Token, is_loopback, load_tokens

__all__ = ["serve", "serve_mcp"]


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
) -> None:
    """Serve ``workflows`` and the ``notebooks`` folder until interrupted; refuse to start without tokens
    unless told, on loopback only."""
    try:
        import uvicorn

        from .app import create_app
    except ImportError as error:
        raise ConfigurationError("The service needs its extra: pip install 'durable-nb[serve]'.") from error
    if not workflows and notebooks is None:
        raise ConfigurationError("Name what to serve: --workflow module:attribute (repeatable) and/or --notebooks DIR.")
    if notebook_outputs is not None and notebooks is None:
        raise ConfigurationError("--notebook-outputs goes with --notebooks DIR, the folder of notebooks to run.")
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
    )
    uvicorn.run(app, host=host, port=port, log_level="warning")


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
