"""Counterfactual agents: fork a run at one of its agent's checkpoints, with the history or a tool's result edited.

At ``turn:N`` (before the Nth model call) the fork asks the model with ``messages`` instead of
the history it had. At ``turn:N/tool:<name>`` (before a tool call) the fork does not call the
tool: ``tool_result`` is its result ("what if the tool had returned X?"), and the agent goes on
with the turn's next call. Either way the edit is one more checkpoint of the agent in the fork,
written with the fork itself; resuming the fork with the workflow (or re-running the cell in a
kernel switched to it, or, for an agent run of its own, calling ``dnb.agent(..., run_id=fork.id)``)
continues from there. The original run is untouched.
"""

from __future__ import annotations

from typing import Any

from ..._ids import new_id
from ..._loop import blocking
from ...errors import InvalidInput
from ...model import Blob, CheckpointDraft, CheckpointRecord, CheckpointStatus
from ...store import resolve_store
from ...store.secret import load_secret
from ..forks.forking import create_fork
from ..runs.run import Run, load_run
from ..state.values import ValueCodec
from .loop import tool_text

__all__ = ["afork_agent", "fork_agent"]


async def afork_agent(
    run_id: str,
    checkpoint_id: str,
    *,
    messages: list[dict[str, Any]] | None = None,
    tool_result: Any = None,
    store: Any = None,
) -> Run:
    """Fork a run at an agent checkpoint: ``messages`` replace the history at ``turn:N``, or
    ``tool_result`` answers the tool call at ``turn:N/tool:<name>`` instead of calling the tool.

    The fork waits, ``pending``, until something runs it: the workflow of the node that ran the
    agent (``flow.resume(fork.id)``), or, for an agent run of its own, the agent called again with
    ``run_id=fork.id``. The original run is untouched.

    Args:
        run_id: The run the agent's checkpoints belong to.
        checkpoint_id: A ``turn:N`` checkpoint (with ``messages``) or a ``turn:N/tool:<name>`` one
            (with ``tool_result``), from ``dnb.history(run_id)``.
        messages: The history to ask the model with at that turn, in place of the stored one.
        tool_result: What the tool call returns in the fork, in place of calling the tool.
        store: The store's URL or a Store (default: ``$DURABLE_NB_STORE``, else ``.durable_nb/runs.db``).

    Returns:
        The fork, ``pending``.

    Raises:
        InvalidInput: The checkpoint is not an agent's turn or tool call, or the wrong one of
            ``messages`` and ``tool_result`` is given.
        CheckpointNotFound: The run has no checkpoint with that id.
    """
    resolved = resolve_store(store, existing=True)
    source = await resolved.get_checkpoint(run_id, checkpoint_id)
    data = source.node_input if isinstance(source.node_input, dict) else {}
    kind = data.get("kind")
    if not source.step.startswith("turn:") or kind not in ("turn", "tool"):
        raise InvalidInput(
            f"Checkpoint {checkpoint_id} ({source.step}) is not an agent's turn or tool call; pick a turn:N or "
            "turn:N/tool:<name> step from durable_nb.history(run_id)."
        )
    if kind == "turn" and (messages is None or tool_result is not None):
        raise InvalidInput(f"At {source.step} (before a model call) give messages=, the history to send instead.")
    if kind == "tool" and (messages is not None or tool_result is None):
        raise InvalidInput(f"At {source.step} (before a tool call) give tool_result=, what the tool returns instead.")
    values = ValueCodec(resolved, load_secret())
    if kind == "turn":
        history = _checked_messages(messages)
        edited: dict[str, Any] = {**data}
        change = "messages"
    else:
        history = (await values.load({"history": data["history"]}))["history"]
        results = [*data.get("results", []), [data.get("call_id"), tool_text(tool_result), False]]
        # The next call has not started: the agent writes its checkpoint before making it.
        edited = {**data, "call": int(data.get("call", 0)) + 1, "results": results, "started": False}
        change = "tool_result"
    stored, blobs = values.encode({"history": history})
    edited["history"] = stored["history"]

    def then(point: CheckpointRecord, fork: CheckpointDraft) -> tuple[list[CheckpointDraft], list[Blob]]:
        return [_edited(point, fork, edited, change)], blobs

    created = await create_fork(resolved, values, run_id, checkpoint_id, None, then=then)
    return await load_run(resolved, created.run.run_id, created.run)


fork_agent = blocking(afork_agent)


def _edited(point: CheckpointRecord, fork: CheckpointDraft, node_input: dict[str, Any], change: str) -> CheckpointDraft:
    """The agent's checkpoint in the fork, after the fork's own: the same place, edited."""
    return CheckpointDraft(
        checkpoint_id=new_id(),
        step=point.step,
        node_id=point.node_id,
        status=CheckpointStatus.OK,
        queue=fork.queue,
        skipped=fork.skipped,
        routes=fork.routes,
        resumes=fork.resumes,
        counters=fork.counters,
        parent_checkpoint_id=fork.checkpoint_id,
        node_input=node_input,
        agent_path=point.agent_path,
        item_index=point.item_index,
        extra={"step_type": point.extra.get("step_type"), "edited": change},
    )


def _checked_messages(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise InvalidInput("messages= takes the history to send: a non-empty list of message dicts.")
    return [dict(m) for m in messages]
