"""An agent's checkpoints inside its node: one before each model call and one before each tool call.

Each is a checkpoint of the enclosing run, written through the node's runner (a workflow's or a
notebook cell's), so it keeps the run's queue, decisions and ownership checks. Its
``node_input`` holds what the agent needs to go on from there: the history so far (stored by
appending, so a turn writes its new messages, not the conversation), and for a tool call the
call's exact arguments and the results of the calls before it in that turn.

When the node runs again (a crash, a retry, a decision), the agent reads the latest of its
checkpoints since the node last finished, in this run or, through a fork, in the run it was
forked from, and continues from there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...model import CheckpointRecord, RunRecord
from ..execution.scope import NodeScope
from .steps import AgentSteps

__all__ = ["AgentSteps", "Journal", "Mark", "Step"]

_HISTORY = "history"


@dataclass(slots=True)
class Step:
    """One checkpoint an agent (or a map_items item) commits inside its node."""

    node_id: str
    step: str
    agent_path: str
    node_input: dict[str, Any]
    blobs: list[Any]
    step_type: str
    item_index: int | None = None
    idempotent: list[tuple[str, str]] = field(default_factory=list)
    # Set by the writer once the step's checkpoint is committed (for its trace span).
    checkpoint_id: str | None = None


@dataclass(slots=True)
class Mark:
    """Where an agent stood when it wrote a checkpoint."""

    kind: str  # "turn" (before a model call), "tool" (before a tool call) or "final" (the loop ended)
    turn: int
    history: list[dict[str, Any]]
    gate_calls: int
    call: int = 0
    results: list[list[Any]] | None = None
    text: str = ""
    # False when a fork set this call up (it answered the call before): it was never started.
    started: bool = True


class Journal:
    """Reads and writes one agent's checkpoints in its node."""

    def __init__(self, scope: NodeScope, path: str, invocation: str | None = None) -> None:
        if scope.steps is None:
            raise RuntimeError("this node's runner keeps no agent checkpoints")
        self.scope = scope
        self.path = path
        self.steps: AgentSteps = scope.steps
        # A worker's checkpoints name the supervisor's call that started it: an earlier call's are not its own.
        self.invocation = invocation
        self._history_address: str | None = None
        # The checkpoint this journal committed last (named by the agent's trace spans).
        self.last_checkpoint: str | None = None

    async def latest(self) -> Mark | None:
        """Return where the agent stood at its latest checkpoint of this node's execution, if any."""
        found = await self._latest_record()
        if found is None:
            return None
        data = found.node_input or {}
        if data.get("invocation") != self.invocation:
            return None
        address = data.get(_HISTORY)
        history = (await self.steps.values.load({_HISTORY: address}))[_HISTORY] if address else []
        self._history_address = address
        return Mark(
            kind=str(data.get("kind")),
            turn=int(data.get("turn", 1)),
            history=list(history),
            gate_calls=int(data.get("gate_calls", 0)),
            call=int(data.get("call", 0)),
            results=[list(r) for r in data.get("results") or []],
            text=str(data.get("text") or ""),
            started=bool(data.get("started", True)),
        )

    async def _latest_record(self) -> CheckpointRecord | None:
        store = self.scope.store
        node = self.scope.node_id
        run: RunRecord | None = None
        run_id: str = self.scope.run_id
        max_seq: int | None = None
        while True:
            found = await store.node_checkpoint(run_id, node, "turn:", max_seq, agent_path=self.path)
            finished = await store.node_checkpoint(run_id, node, "after:", max_seq)
            if found is not None:
                # Checkpoints of an execution of the node that has finished since belong to that one.
                return found if finished is None or finished.seq < found.seq else None
            if finished is not None:
                return None
            run = await store.get_run(run_id)
            if run.parent_run_id is None or run.parent_checkpoint_id is None:
                return None
            fork_point = await store.get_checkpoint(run.parent_run_id, run.parent_checkpoint_id)
            run_id, max_seq = run.parent_run_id, fork_point.seq

    async def write(self, step: str, kind: str, mark: Mark, tool_path: str | None = None, **data: Any) -> None:
        """Commit a checkpoint ``step`` holding ``mark`` (the history is stored by appending)."""
        values = self.steps.values
        previous = {_HISTORY: self._history_address} if self._history_address else {}
        stored, blobs = values.encode_updates({_HISTORY: mark.history}, previous)
        self._history_address = stored[_HISTORY]
        node_input: dict[str, Any] = {
            "kind": mark.kind,
            "turn": mark.turn,
            _HISTORY: self._history_address,
            "gate_calls": mark.gate_calls,
            **data,
        }
        if self.invocation is not None:
            node_input["invocation"] = self.invocation
        if mark.kind == "tool":
            node_input["call"] = mark.call
            node_input["results"] = mark.results or []
        if mark.kind == "final":
            node_input["text"] = mark.text
        written = Step(
            node_id=self.scope.node_id,
            item_index=self.scope.item_index,
            step=step,
            agent_path=tool_path or self.path,
            node_input=node_input,
            blobs=blobs,
            step_type=kind,
        )
        await self.steps.write(written)
        self.last_checkpoint = written.checkpoint_id
