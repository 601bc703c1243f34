"""The MCP tools (issue 17), driven by the official SDK's own client over stdio.

``durable-nb mcp`` runs as a subprocess; the SDK's ``ClientSession`` lists its tools, starts a
gated run, reads its status, approves it and sees it complete; a second approval and calls
beyond the session's scope are tool errors that change nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

import durable_nb as dnb

pytest.importorskip("mcp", reason="the MCP tools need the serve extra (mcp)")

ROOT = Path(__file__).resolve().parent.parent
FLOW = """
import os
import durable_nb as dnb

flow = dnb.Workflow("gated", store=os.environ["MCP_STORE"])


@flow.node
def draft(state):
    return {"draft": "hello"}


@flow.node(after="draft")
def publish(state):
    decision = dnb.gate("publish?", {"draft": state["draft"]})
    return {"published": decision.approved, "by": decision.by}
"""


def _text(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


def _failed(result: Any) -> bool:
    return bool(getattr(result, "is_error", getattr(result, "isError", False)))


async def _session(tmp_path: Path, store_url: str, scope: str, script: Any) -> Any:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    (tmp_path / "mcp_flows.py").write_text(FLOW)
    env = dict(os.environ, MCP_STORE=store_url, PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path)]))
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "durable_nb.cli", "mcp", "--workflow", "mcp_flows:flow", "--scope", scope, "--store", store_url],
        env=env,
        cwd=str(tmp_path),
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        return await script(session)


async def _until(session: Any, run_id: str, status: str) -> dict[str, Any]:
    for _ in range(400):
        found = json.loads(_text(await session.call_tool("run_get", {"run_id": run_id})))
        if found["status"] == status:
            return found
        await asyncio.sleep(0.025)
    raise AssertionError(f"run {run_id} is {found['status']}, not {status}")


def test_start_read_and_approve_through_the_sdk_client(tmp_path: Path, store_url: str) -> None:
    async def script(session: Any) -> dict[str, Any]:
        tools = {t.name for t in (await session.list_tools()).tools}
        assert tools == {"run_get", "run_list", "run_start", "run_approve", "run_reject", "run_resume", "run_cancel"}
        started = await session.call_tool("run_start", {"workflow": "gated", "idempotency_key": "mcp-1"})
        assert not _failed(started), _text(started)
        run_id = json.loads(_text(started))["id"]
        again = json.loads(
            _text(await session.call_tool("run_start", {"workflow": "gated", "idempotency_key": "mcp-1"}))
        )
        assert again["id"] == run_id
        paused = await _until(session, run_id, "paused")
        assert set(paused) == {"run_id", "status", "node_counts", "executions"}
        decided = await session.call_tool("run_approve", {"run_id": run_id, "comment": "ok"})
        assert not _failed(decided) and json.loads(_text(decided))["approved"] is True
        late = await session.call_tool("run_approve", {"run_id": run_id})
        assert _failed(late) and "AlreadyResumed" in _text(late)
        await _until(session, run_id, "completed")
        listed = json.loads(_text(await session.call_tool("run_list", {"name": "gated", "status": "completed"})))
        assert [r["run_id"] for r in listed["runs"]] == [run_id]
        unknown = await session.call_tool("run_get", {"run_id": "0192-nope"})
        assert _failed(unknown) and "RunNotFound" in _text(unknown)
        return {"run_id": run_id}

    found = asyncio.run(_session(tmp_path, store_url, "admin", script))
    assert dnb.get_run(found["run_id"], store=store_url).state["by"] == "mcp"


@pytest.mark.backends("sqlite")  # the MCP server over stdio: its PostgreSQL case is the first test
def test_a_read_scope_cannot_start_or_decide(tmp_path: Path, store_url: str) -> None:
    flow = dnb.Workflow("gated", store=store_url)

    @flow.node
    def draft(state: dict[str, Any]) -> dict[str, Any]:
        return {"draft": "hello"}

    @flow.node(after="draft")
    def publish(state: dict[str, Any]) -> dict[str, Any]:
        return {"published": dnb.gate("publish?").approved}

    paused = flow.run({})
    assert paused.status == "paused"

    async def script(session: Any) -> None:
        started = await session.call_tool("run_start", {"workflow": "gated"})
        assert _failed(started) and "Forbidden" in _text(started)
        decided = await session.call_tool("run_approve", {"run_id": paused.id})
        assert _failed(decided) and "Forbidden" in _text(decided)
        seen = json.loads(_text(await session.call_tool("run_get", {"run_id": paused.id})))
        assert seen["status"] == "paused"

    asyncio.run(_session(tmp_path, store_url, "read", script))
    assert len(dnb.runs("gated", store=store_url)) == 1
    assert dnb.get_run(paused.id, store=store_url).status == "paused"


@pytest.mark.backends("sqlite")  # the MCP server over stdio: its PostgreSQL case is the first test
def test_the_tools_over_http_take_the_requests_token(tmp_path: Path, store_url: str) -> None:
    """The same tools mounted on `durable-nb serve` at /mcp/: the bearer token sets the scope and the `by`."""
    from mcp import ClientSession
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
    from servicekit import DECIDER, FLOWS, READER, Server, free_port

    (tmp_path / "service_flows.py").write_text(FLOWS)
    server = Server(tmp_path, store_url, free_port())
    try:
        run_id = server.client.run("gated", {})["id"]
        assert server.client.wait(run_id)["status"] == "paused"

        async def as_token(token: str, tool: str, arguments: dict[str, Any]) -> Any:
            headers = {"Authorization": f"Bearer {token}"}
            async with create_mcp_http_client(headers=headers) as http:
                async with streamable_http_client(f"{server.client.url}/mcp/", http_client=http) as streams:
                    async with ClientSession(streams[0], streams[1]) as session:
                        await session.initialize()
                        return await session.call_tool(tool, arguments)

        refused = asyncio.run(as_token(READER, "run_approve", {"run_id": run_id}))
        assert _failed(refused) and "Forbidden" in _text(refused)
        assert server.client.get(run_id)["status"] == "paused"
        decided = asyncio.run(as_token(DECIDER, "run_approve", {"run_id": run_id, "comment": "via mcp"}))
        assert not _failed(decided), _text(decided)
        assert server.client.wait(run_id, until=("completed", "failed"))["status"] == "completed"
        assert dnb.get_run(run_id, store=store_url).state["by"] == "ana"
    finally:
        server.stop()
