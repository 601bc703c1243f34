"""``dnb.agent``: a tool-calling loop whose every model turn and tool call is checkpointed first.

Before the Nth model call the agent commits ``turn:N`` (the history it sends); before each tool
call, ``turn:N/tool:<name>`` (the model's reply, the call's arguments, the results of the
calls before it); when the model answers without calling a tool, ``turn:N+1`` with the final
answer. A crash therefore repeats at most the one model call or the one tool call in flight:
run again, the node's agent reads its latest checkpoint and goes on from there. A tool that
pauses at a gate is called again, with the decision, when the run continues; the other calls
of its turn are then answered with a note that they did not run, which keeps the history
valid for the model APIs (every tool call needs a result) and lets the model ask again.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..._loop import blocking
from ...errors import AgentFailed, ConfigurationError, NoActiveNode
from ..execution.scope import NodeScope, current_scope, enter_scope, leave_scope
from ..tracing import AGENT_TOOL, AGENT_TURN, error_status, name_checkpoint, traced
from .arguments import AgentCall
from .journal import Journal, Mark
from .models import Model, ToolCall
from .narrate import Narrator, calls_of
from .tools import Tool

__all__ = ["NOT_RUN", "AgentResult", "aagent", "agent", "agent_path"]

NOT_RUN = (
    "This tool call did not run: the run paused at another call of the same turn. Ask again if it is still needed."
)


@dataclass(slots=True)
class AgentResult:
    """What an agent ended with: its final text, the whole history, and how many turns it took."""

    text: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    turns: int = 0


async def aagent(
    client: Any,
    messages: Any,
    tools: Iterable[Any] = (),
    *,
    model: str | None = None,
    name: str = "agent",
    system: str | None = None,
    max_turns: int = 20,
    store: Any = None,
    run_key: str | None = None,
    run_id: str | None = None,
    **options: Any,
) -> AgentResult:
    """Run a tool-calling loop durably, checkpointing before every model and tool call.

    ``client`` is an ``openai`` or ``anthropic`` client (sync or async; ``model=`` names the model,
    other keywords go to each request), or a function ``(messages, tools) -> message``. ``tools``
    are plain functions (schemas from type hints and docstrings) or ``@dnb.tool`` ones.
    ``name`` tells several agents of one node apart. Inside a node or a ``%%durable`` cell the
    checkpoints go to that run; anywhere else the agent is a run of its own in ``store``, which
    ``run_key`` finds again (to resume it after a crash), or ``run_id`` names (a fork made with
    ``fork_agent``, or an earlier run of this agent, to go on with). Returns an ``AgentResult``.

    Args:
        client: An ``openai`` client (Chat Completions) or an ``anthropic`` client (Messages), sync
            or async, or any function ``(messages, tools) -> message`` in the Chat Completions shape.
        messages: The question (text) or the conversation so far (a list of messages).
        tools: Plain functions, sync or async, or ``@dnb.tool`` ones; a tool that raises hands
            its error to the model as the call's result.
        model: The model's name, sent with each request.
        name: The agent's name: its checkpoints are under ``agent:<name>``.
        system: A system prompt.
        max_turns: How many model calls before giving up with ``AgentFailed``.
        store: Outside a node or cell, the store the agent's own run lives in.
        run_key: Outside a node or cell, a key that finds the agent's run again after a crash.
        run_id: Outside a node or cell, a run to go on with (a fork made with ``fork_agent``).
        **options: Sent with each request (``temperature=…``, ``max_tokens=…``).

    Returns:
        The final text, the whole history and the number of turns.

    Raises:
        AgentFailed: ``max_turns`` were used up, a reply cannot be read, or the agent's own run failed.
        ConfigurationError: Inside a map item, or the client is none of the kinds above.
        RunOwnedElsewhere: Another live call works on the run of that ``run_key``.
        GatePending: A tool's gate waits, outside a node or cell (the message names the run).

    Example:
        >>> reply = dnb.agent(openai.OpenAI(), "Where is order A-12?", [lookup_order],
        ...                   model="gpt-4o-mini", name="support")
        >>> reply.text
    """
    call = AgentCall(client, messages, tools, model, name, system, max_turns, options)
    if current_scope() is None:
        from .standalone import arun_agent  # a workflow of its own: imported only when needed

        return await arun_agent(call, store=store, run_key=run_key, run_id=run_id)
    if store is not None or run_key is not None or run_id is not None:
        raise ConfigurationError(
            "store=, run_key= and run_id= are for an agent run on its own; inside a node it uses the node's run."
        )
    return await _drive(_scope(), call)


agent = blocking(aagent)


def _scope() -> NodeScope:
    scope = current_scope()
    if scope is not None and scope.remote is not None:
        raise ConfigurationError(
            "dnb.agent() cannot run on an executor's worker: its turns are committed by the process that "
            "owns the run. Run the node that calls the agent without executor= (its tools may still use one)."
        )
    if scope is None or scope.steps is None:
        raise NoActiveNode(
            "dnb.agent() was called outside a durable node. Call it inside a Workflow node function or a "
            "%%durable cell, where each turn can be checkpointed."
        )
    return scope


def agent_path(scope: NodeScope, name: str, supervisor: bool = False) -> str:
    """Return an agent's path: ``agent:<name>``, or ``supervisor:<name>`` when its tools are agents
    (whose paths are ``supervisor:<s>/worker:<w>``), under its map item or the agent whose tool runs it."""
    if scope.invocation is not None:
        # A worker, called by its supervisor: each call is told apart by its call id instead.
        return f"{scope.agent_path}/worker:{name}"
    own = f"{'supervisor' if supervisor else 'agent'}:{name}"
    if scope.agent_path:
        base = f"{scope.agent_path}/{own}"
    else:
        base = own if scope.item_index is None else f"item:{scope.item_index}/{own}"
    # A node that runs the same agent twice keeps two sets of checkpoints: its code runs again
    # from the top after a crash, so the count comes out the same.
    count = scope.agent_calls.get(base, 0) + 1
    scope.agent_calls[base] = count
    return base if count == 1 else f"{base}#{count}"


async def _drive(scope: NodeScope, call: AgentCall) -> AgentResult:
    checked = call.checked()
    # Tools run with the scope current, so gate() and @idempotent inside them find their node.
    token = enter_scope(scope)
    try:
        path = agent_path(scope, call.name, supervisor=any(t.worker for t in checked.tools.values()))
        invocation, scope.invocation = scope.invocation, None  # this agent's own tools are not its workers
        try:
            loop = _Loop(scope, checked.model, checked.tools, path, call.max_turns, invocation)
            return await loop.run(call.messages, call.system)
        finally:
            scope.invocation = invocation
    finally:
        leave_scope(token)


class _Loop:
    """One agent's turns, resumed from its latest checkpoint."""

    def __init__(
        self,
        scope: NodeScope,
        model: Model,
        tools: dict[str, Tool],
        path: str,
        max_turns: int,
        invocation: str | None = None,
    ) -> None:
        self.scope = scope
        self.model = model
        self.tools = tools
        self.path = path
        self.max_turns = max_turns
        self.journal = Journal(scope, path, invocation)
        self.tell = Narrator(path, getattr(scope.steps, "observer", None))

    async def run(self, messages: Any, system: str | None) -> AgentResult:
        first = self.model.start(messages, system)
        mark = await self.journal.latest()
        resumed = mark is not None
        if mark is not None:
            self.tell.replayed(mark.history, mark.turn)
        if mark is None:
            mark = Mark("turn", 1, first, self.scope.gate_calls)
            await self.journal.write("turn:1", "llm_call", mark)
        # Gates are matched to decisions by the order they are asked in: start where the checkpoint stood.
        self.scope.gate_calls = mark.gate_calls
        while True:
            if mark.kind == "final":
                return AgentResult(mark.text, mark.history, mark.turn - 1)
            if mark.kind == "turn":
                self._check_turns_left(mark.turn)
                with traced(AGENT_TURN, self.scope.run_id, self.scope.node_id, agent=self.path, turn=mark.turn) as span:
                    # The turn's checkpoint, committed before the model is asked (unknown when resumed at it).
                    name_checkpoint(span, self.journal.last_checkpoint)
                    reply = await self.model.ask(mark.history, list(self.tools.values()))
                self.tell.reply(mark.turn, reply.text, reply.calls)
                history = [*mark.history, reply.message]
                if not reply.calls:
                    done = Mark("final", mark.turn + 1, history, self.scope.gate_calls, text=reply.text)
                    await self.journal.write(f"turn:{mark.turn + 1}", "llm_call", done)
                    return AgentResult(reply.text, history, mark.turn)
                mark = Mark("tool", mark.turn, history, self.scope.gate_calls, call=0, results=[])
                mark = await self._call_tools(mark, reply.calls, resumed=False)
            else:
                calls = calls_of(mark.history[-1])
                mark = await self._call_tools(mark, calls, resumed=resumed)
            resumed = False

    async def _call_tools(self, mark: Mark, calls: list[ToolCall], *, resumed: bool) -> Mark:
        """Call the turn's tools from ``mark.call`` on, each after its checkpoint; return the next turn's mark."""
        results = list(mark.results or [])
        # Resumed after a pause at this call: its siblings after it are answered, not run.
        paused_here = resumed and len(self.scope.decisions) > mark.gate_calls
        for index in range(mark.call, len(calls)):
            call = calls[index]
            if paused_here and index > mark.call:
                results.append([call.id, NOT_RUN, True])
                continue
            at = Mark("tool", mark.turn, mark.history, self.scope.gate_calls, call=index, results=results)
            written = not (resumed and index == mark.call and mark.started)
            if written:
                await self.journal.write(
                    f"turn:{mark.turn}/tool:{call.name}",
                    "tool_call",
                    at,
                    tool_path=f"{self.path}/tool:{call.name}",
                    name=call.name,
                    call_id=call.id,
                    arguments=_arguments_record(call),
                )
            with traced(AGENT_TOOL, self.scope.run_id, self.scope.node_id, agent=self.path, tool=call.name) as span:
                name_checkpoint(span, self.journal.last_checkpoint if written else None)
                text, is_error = await self._dispatch(call)
                if is_error:
                    error_status(span, text)  # the model is shown the failure; the span says the call failed
            self.tell.result(mark.turn, call, text, is_error)
            results.append([call.id, text, is_error])
        by_id = {c.id: c for c in calls}
        answers = [(by_id[r[0]], str(r[1]), bool(r[2])) for r in results if r[0] in by_id]
        history = [*mark.history, *self.model.results(answers)]
        # Committed even when no turn is left: the results are kept, so no call of this turn runs again.
        following = Mark("turn", mark.turn + 1, history, self.scope.gate_calls)
        await self.journal.write(f"turn:{following.turn}", "llm_call", following)
        return following

    def _check_turns_left(self, turn: int) -> None:
        """Refuse to ask the model a turn past ``max_turns``."""
        if turn > self.max_turns:
            raise AgentFailed(
                f"Agent {self.path!r} used its {self.max_turns} turns without a final answer. Its turns and tool "
                "results so far are kept: raise max_turns and resume the run to go on from the next turn (no "
                "tool call runs again)."
            )

    async def _dispatch(self, call: ToolCall) -> tuple[str, bool]:
        """Run one tool call; a tool's error goes back to the model as its result."""
        chosen = self.tools.get(call.name)
        if chosen is None:
            return f"There is no tool named {call.name!r}; the tools are {sorted(self.tools)}.", True
        try:
            arguments = call.parsed()
        except ValueError as error:
            return f"The arguments of {call.name!r} are not valid: {error}. Send a JSON object.", True
        previous = self.scope.agent_path, self.scope.invocation
        if chosen.worker:
            # A worker's checkpoints go under this agent's path, told apart by the call that asked.
            self.scope.agent_path, self.scope.invocation = self.path, call.id
        else:
            self.scope.agent_path = f"{self.path}/tool:{call.name}"
        try:
            value = chosen.fn(**arguments)
            if inspect.isawaitable(value):
                value = await value
        except TypeError as error:
            return f"{call.name} could not take these arguments: {error}.", True
        except Exception as error:  # noqa: BLE001 - the model sees the failure and may try otherwise
            return f"{call.name} failed: {type(error).__name__}: {error}", True
        finally:
            self.scope.agent_path, self.scope.invocation = previous
        return tool_text(value), False


def _arguments_record(call: ToolCall) -> Any:
    try:
        return call.parsed()
    except ValueError:
        return call.arguments


def tool_text(value: Any) -> str:
    """Return what the model is shown of a tool's result: text as is, anything else as JSON."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)
