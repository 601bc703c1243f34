"""The service's operations as MCP tools, for AI assistants: ``durable-nb mcp`` serves them over stdio.

The tools are the HTTP API's, with its shapes and scopes: ``run_get`` and ``run_list`` need
``read``; ``run_approve`` and ``run_reject``, ``decide``; ``run_start``, ``run_resume`` and
``run_cancel``, ``admin``; so does ``notebook_start``, there only when the server runs notebooks.
Over stdio the scope is the one the operator grants with ``--scope``.
A refusal is a tool error naming the library's error type, and changes nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from ..errors import DurableError
from ..model import RunStatus
from .auth import Token
from .operations import Service

__all__ = ["build_mcp"]

T = TypeVar("T")


def build_mcp(service: Service, caller: Callable[[], Token]) -> Any:
    """Return an MCP server whose tools call ``service`` for ``caller()`` (the token of the request)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    async def as_caller(needed: str, call: Callable[[Token], Awaitable[T]]) -> T:
        token = caller()
        if not token.allows(needed):
            raise ToolError(f"Forbidden: this session's scope is {token.scope!r}; the tool needs {needed!r}.")
        try:
            return await call(token)
        except DurableError as error:
            raise ToolError(f"{type(error).__name__}: {error}") from None

    @contextlib.asynccontextmanager
    async def lifespan(server: Any) -> AsyncIterator[None]:
        try:
            yield None
        finally:
            await service.stop()  # the runs it was driving are handed back, pending

    server = MCPServer(
        "durable_nb",
        instructions=(
            "Durable workflow runs: start them, read their status, and approve or reject the gates they wait at. "
            f"Workflows served: {', '.join(sorted(service.flows)) or 'none'}."
            + (" Notebooks of the server's folder run with notebook_start." if service.notebooks is not None else "")
        ),
        lifespan=lifespan,
    )

    @server.tool()
    async def run_get(run_id: str) -> dict[str, Any]:
        """A run's status: {run_id, status, node_counts, executions}."""
        return await as_caller("read", lambda _: service.status(run_id))

    @server.tool()
    async def run_list(name: str | None = None, status: str | None = None) -> dict[str, Any]:
        """{"runs": [...]}: runs, newest first, optionally of one workflow and one status (pending, paused, …)."""
        if status is not None and status not in {s.value for s in RunStatus}:
            raise ToolError(f"InvalidInput: status is one of {[s.value for s in RunStatus]}, not {status!r}.")
        wanted = None if status is None else RunStatus(status)
        return {"runs": await as_caller("read", lambda _: service.list(name, wanted))}

    @server.tool()
    async def run_start(
        workflow: str, input: dict[str, Any] | None = None, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Start a run of a served workflow; a repeated idempotency_key returns the first run."""
        return await as_caller("admin", lambda _: service.start(workflow, input or {}, idempotency_key))

    if service.notebooks is not None:

        @server.tool()
        async def notebook_start(
            path: str, parameters: dict[str, Any] | None = None, run: str | None = None
        ) -> dict[str, Any]:
            """Run a notebook of the server's folder; the same path and parameters return the same run."""
            return await as_caller("admin", lambda _: service.start_notebook(path, parameters or {}, run))

    @server.tool()
    async def run_approve(
        run_id: str, comment: str | None = None, value: Any = None, node: str | None = None
    ) -> dict[str, Any]:
        """Approve the gate a run waits at (one decision wins); the run then continues."""
        return await as_caller("decide", lambda token: service.decide(run_id, True, comment, value, node, token.name))

    @server.tool()
    async def run_reject(
        run_id: str, comment: str | None = None, value: Any = None, node: str | None = None
    ) -> dict[str, Any]:
        """Reject the gate a run waits at; the run continues with the rejection."""
        return await as_caller("decide", lambda token: service.decide(run_id, False, comment, value, node, token.name))

    @server.tool()
    async def run_resume(run_id: str) -> dict[str, Any]:
        """Continue a failed or cancelled run from its last checkpoint."""
        return await as_caller("admin", lambda _: service.resume(run_id))

    @server.tool()
    async def run_cancel(run_id: str) -> dict[str, Any]:
        """Cancel a pending, running or paused run."""
        return await as_caller("admin", lambda _: service.cancel(run_id))

    return server
