"""An agent as a run of its own: ``dnb.agent(...)`` called outside any node or cell.

The agent runs as the one node of a workflow named ``agent:<name>``. With ``run_key`` the run
is found again: calling the same agent with the same key after a crash resumes it (the turns
already answered are not asked again), and after it completed returns its answer at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...errors import AgentFailed, GatePending
from ...model import RunStatus
from ..ownership import owner_alive
from ..workflow import Workflow
from .loop import AgentResult, aagent

__all__ = ["arun_agent"]


async def arun_agent(
    client: Any,
    messages: Any,
    tools: Iterable[Any],
    *,
    model: str | None,
    name: str,
    system: str | None,
    max_turns: int,
    options: dict[str, Any],
    store: Any,
    run_key: str | None,
) -> AgentResult:
    """Run the agent as a run of its own (resumed or returned when ``run_key`` names an earlier one)."""
    flow = Workflow(f"agent:{name}", store=store)
    described = list(tools)

    @flow.node(name="agent", retry_count=0)
    async def run_agent(state: dict[str, Any]) -> dict[str, Any]:
        result = await aagent(
            client, messages, described, model=model, name=name, system=system, max_turns=max_turns, **options
        )
        return {"text": result.text, "messages": result.messages, "turns": result.turns}

    run = await flow.arun({}, idempotency_key=run_key)
    record = run.record
    unfinished = record.status in (RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.PENDING) or (
        record.status is RunStatus.RUNNING and not owner_alive(record.run_id, record.owner, record.lease_until)
    )
    if run_key is not None and unfinished and run.status != "completed":
        # An earlier call with this key stopped (a crash, an error): go on from its last turn.
        run = await flow.aresume(run.id)
    if run.status == "paused":
        raise GatePending(
            f"Agent {name!r} (run {run.id}) waits at a gate in one of its tools: decide it with "
            f"durable_nb.approve({run.id!r}) or reject(...), then call the agent again with run_key={run_key!r}.",
            run_id=run.id,
            node_id="agent",
        )
    if run.status != "completed":
        raise AgentFailed(
            f"Agent {name!r} (run {run.id}) stopped: {run.error}. Its turns so far are kept: call it again "
            "with the same run_key to go on from the last one."
        )
    state = await run.astate()
    return AgentResult(state["text"], state["messages"], state["turns"])
