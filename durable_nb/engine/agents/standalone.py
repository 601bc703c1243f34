"""An agent as a run of its own: ``dnb.agent(...)`` called outside any node or cell.

The agent runs as the one node of a workflow named ``agent:<name>``. With ``run_key`` the run
is found again: calling the same agent with the same key after a crash or a failure resumes it
(the turns already answered are not asked again), and after it completed returns its answer at
once. ``run_id`` names the run to go on with instead: a fork made with ``fork_agent``, or an
earlier run of this agent. Only a run that existed before the call is resumed: a call whose own
run fails raises, so a failed model request (a paid one) is never repeated behind the caller's
back. Arguments are checked before anything is stored: a call refused for them leaves no run.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...errors import (
    AgentFailed,
    AlreadyResumed,
    ConfigurationError,
    GatePending,
    InvalidInput,
    RunOwnedElsewhere,
    WorkflowMismatch,
)
from ...model import RunStatus
from ..runs.ownership import owner_alive
from ..runs.run import Run
from ..workflows.workflow import Workflow
from .arguments import AgentCall
from .loop import AgentResult, aagent

__all__ = ["arun_agent"]


async def arun_agent(call: AgentCall, *, store: Any, run_key: str | None, run_id: str | None) -> AgentResult:
    """Run the agent as a run of its own: a new one, the one ``run_key`` finds, or ``run_id``."""
    checked = call.checked()
    if run_key is not None and (not isinstance(run_key, str) or not run_key):
        raise InvalidInput(f"run_key= takes non-empty text that finds this agent's run again, not {run_key!r}.")
    if run_key is not None and run_id is not None:
        raise ConfigurationError(
            "Give run_key= (finds the run of that key, or starts it) or run_id= (goes on with that run), not both."
        )
    # The node gets the tools already described: an iterator given as tools= is read only once.
    ready = replace(call, tools=list(checked.tools.values()))
    flow = Workflow(f"agent:{call.name}", store=store)

    @flow.node(name="agent", retry_count=0)
    async def run_agent(state: dict[str, Any]) -> dict[str, Any]:
        result = await aagent(
            ready.client,
            ready.messages,
            ready.tools,
            model=ready.model,
            name=ready.name,
            system=ready.system,
            max_turns=ready.max_turns,
            **ready.options,
        )
        return {"text": result.text, "messages": result.messages, "turns": result.turns}

    if run_id is None:
        # Created pending when new: whether new or found, the one resume below is the only time it runs.
        run = await flow.astart({}, idempotency_key=run_key)
    else:
        run = await _named_run(flow, run_id, call.name)
    finished = await _go_on(flow, run, call.name, run_key)
    return await _answer(finished, call.name, run_key)


async def _named_run(flow: Workflow, run_id: str, name: str) -> Run:
    """Return the run ``run_id`` when it is a run of this agent; say which agent or workflow it is otherwise."""
    try:
        return await flow.aget(run_id)
    except WorkflowMismatch:
        owner = (await flow.store.get_run(run_id)).name
    if owner.startswith("agent:"):
        advice = f"pass name={owner.removeprefix('agent:')!r} to go on with it"
    else:
        advice = f"an agent inside workflow {owner!r}: resume it with that workflow, flow.resume({run_id!r})"
    raise WorkflowMismatch(f"Run {run_id} is not a run of agent {name!r} ({owner!r}): {advice}.") from None


async def _go_on(flow: Workflow, run: Run, name: str, run_key: str | None) -> Run:
    """Drive the run from its last checkpoint unless it is finished, paused, or another live call has it."""
    if run.record.status in (RunStatus.COMPLETED, RunStatus.PAUSED):
        return run
    _refuse_if_busy(run, name, run_key)
    try:
        return await flow.aresume(run.id)
    except (AlreadyResumed, RunOwnedElsewhere):
        # Another call took the run between reading it and resuming it.
        latest = await flow.aget(run.id)
        if latest.record.status in (RunStatus.COMPLETED, RunStatus.PAUSED):
            return latest
        _refuse_if_busy(latest, name, run_key)
        raise


def _refuse_if_busy(run: Run, name: str, run_key: str | None) -> None:
    record = run.record
    if record.status is RunStatus.RUNNING and owner_alive(record.run_id, record.owner, record.lease_until):
        again = f"with run_key={run_key!r}" if run_key is not None else f"with run_id={run.id!r}"
        raise RunOwnedElsewhere(
            f"Agent {name!r} (run {run.id}) is being run by another call right now ({record.owner}); one run is "
            f"never driven twice at once. Wait for that call to return, then call again {again} to get its answer."
        )


async def _answer(run: Run, name: str, run_key: str | None) -> AgentResult:
    """Return the agent's answer, or raise what stopped it and how to go on."""
    again = f"run_key={run_key!r}" if run_key is not None else f"run_id={run.id!r}"
    if run.status == "paused":
        raise GatePending(
            f"Agent {name!r} (run {run.id}) waits at a gate in one of its tools: decide it with "
            f"durable_nb.approve({run.id!r}) or reject(...), then call the agent again with {again}.",
            run_id=run.id,
            node_id="agent",
        )
    if run.status != "completed":
        reason = (run.error or "").rstrip(".")
        raise AgentFailed(
            f"Agent {name!r} (run {run.id}) {run.status}: {reason}. Its turns so far are kept: call it again "
            f"with {again} to go on from the one that stopped (fix its cause first)."
        )
    state = await run.astate()
    return AgentResult(state["text"], state["messages"], state["turns"])
