"""An agent as a run of its own: ``dnb.agent(..., store=URL, run_key=K)`` outside any node or cell.

Driven with the real ``openai`` and ``anthropic`` SDKs against the scripted model server, which
counts every request (a failed one too: a provider bills it). Checked: a call resumes only a run
that existed before it (its own failure is raised, never retried behind the caller's back); a
call refused for its arguments leaves no run; a second call while the first still works is told
so; a fork of an agent run made with ``fork_agent`` runs to completion with ``run_id=``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from agentkit import ModelServer, Script, anthropic_client, openai_client

import durable_nb as dnb


@pytest.fixture
def server() -> Iterator[ModelServer]:
    running = ModelServer(Script(turns=3, calls_per_turn=1, tools=("lookup",)))
    yield running
    running.close()


def _client(server: ModelServer, provider: str) -> Any:
    return (openai_client if provider == "openai" else anthropic_client)(server)


def _counted_lookup(calls: list[str]) -> Any:
    def lookup(turn: int, k: int) -> str:
        """Look something up."""
        calls.append(f"{turn},{k}")
        return f"found {turn}/{k}"

    return lookup


def lookup(turn: int, k: int) -> str:
    """Look something up."""
    return f"found {turn}/{k}"


def _only_run(url: str, name: str) -> str:
    runs = dnb.runs(f"agent:{name}", store=url)
    assert len(runs) == 1, runs
    return str(runs["run_id"].iloc[0])


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_failed_model_request_is_raised_not_retried(server: ModelServer, store_url: str, provider: str) -> None:
    calls: list[str] = []
    lookup = _counted_lookup(calls)
    client = _client(server, provider)
    server.fail_at = {1: 500}

    def ask() -> dnb.AgentResult:
        return dnb.agent(client, "Find it.", [lookup], model="scripted", name="solo", store=store_url, run_key="k")

    with pytest.raises(dnb.AgentFailed) as failed:
        ask()
    run_id = _only_run(store_url, "solo")
    assert "InternalServerError" in str(failed.value) and run_id in str(failed.value)
    assert "run_key='k'" in str(failed.value)
    # One request per turn so far: the one that failed was not sent again by this call.
    assert [server.requests[(provider, t)] for t in range(3)] == [1, 1, 0]
    steps = list(dnb.history(run_id, store=store_url)["step"])
    assert steps.count("failed:agent") == 1 and steps[-2:] == ["failed:agent", "run_end"], steps
    # Called again with its key: the run existed before this call, so it goes on from the failed turn.
    assert ask().text == "done after 3 turns"
    assert [server.requests[(provider, t)] for t in range(3)] == [1, 2, 1]
    assert calls == ["0,0", "1,0"]
    assert not server.refused, server.refused


def test_a_call_whose_own_run_fails_runs_its_node_once(store_url: str) -> None:
    asked: list[int] = []

    def unreadable(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        asked.append(1)
        return 5  # not a message: the node fails

    with pytest.raises(dnb.AgentFailed, match="returned int"):
        dnb.agent(unreadable, "Go.", store=store_url, run_key="once")
    assert len(asked) == 1
    run_id = _only_run(store_url, "agent")
    events = list(dnb.events(run_id, store=store_url)["type"].astype(str))
    assert events.count("node_started") == 1 and events.count("node_failed") == 1, events
    assert dnb.get_run(run_id, store=store_url).status == "failed"


@pytest.mark.parametrize(
    ("arguments", "error", "fragment"),
    [
        pytest.param({"tools": lookup}, dnb.ConfigurationError, "tools=[lookup]", id="tools-not-a-list"),
        pytest.param({"messages": 5}, dnb.InvalidInput, "messages=", id="messages-int"),
        pytest.param({"max_turns": 0}, dnb.ConfigurationError, "max_turns", id="max-turns-zero"),
        pytest.param({"temprature": 0}, dnb.ConfigurationError, "'temprature'", id="misspelt-request-option"),
    ],
)
def test_a_call_refused_for_its_arguments_leaves_no_run(
    server: ModelServer, store_url: str, arguments: dict[str, Any], error: type[Exception], fragment: str
) -> None:
    options: dict[str, Any] = {"messages": "Find it.", "tools": [lookup], **arguments}
    with pytest.raises(error) as refused:
        dnb.agent(openai_client(server), model="scripted", store=store_url, run_key="k", **options)
    message = str(refused.value)
    assert fragment in message and "call it again" not in message, message
    with pytest.raises(dnb.StoreNotFound):  # refused before anything was stored: not even the store exists
        dnb.runs(store=store_url)
    assert sum(server.requests.values()) == 0
    # Fixed, the same key starts the run: nothing of the refused call stands in its way.
    fixed = dnb.agent(openai_client(server), "Find it.", [lookup], model="scripted", store=store_url, run_key="k")
    assert fixed.text == "done after 3 turns"


def test_a_second_call_while_the_first_works_is_told_so(server: ModelServer, store_url: str) -> None:
    inside, release = threading.Event(), threading.Event()
    outcome: dict[str, Any] = {}

    @dnb.tool(name="lookup")
    def slow_lookup(turn: int, k: int) -> str:
        """Look something up (waits until the test lets it go)."""
        inside.set()
        assert release.wait(60), "the test never released the tool"
        return "found"

    def first() -> None:
        try:
            outcome["result"] = dnb.agent(
                openai_client(server), "Go.", [slow_lookup], model="scripted", store=store_url, run_key="busy"
            )
        except BaseException as error:  # noqa: BLE001 - handed to the test thread
            outcome["error"] = error

    worker = threading.Thread(target=first)
    worker.start()
    try:
        assert inside.wait(60), outcome
        asked = sum(server.requests.values())
        with pytest.raises(dnb.RunOwnedElsewhere, match="another call") as busy:
            dnb.agent(openai_client(server), "Go.", [slow_lookup], model="scripted", store=store_url, run_key="busy")
        assert "run_key='busy'" in str(busy.value) and "None" not in str(busy.value)
        assert sum(server.requests.values()) == asked  # the second call asked nothing
    finally:
        release.set()
        worker.join(120)
    assert "error" not in outcome, outcome
    assert outcome["result"].text == "done after 3 turns"
    again = dnb.agent(openai_client(server), "Go.", [slow_lookup], model="scripted", store=store_url, run_key="busy")
    assert again.text == "done after 3 turns"
    assert [server.requests[("openai", t)] for t in range(3)] == [1, 1, 1]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_fork_of_an_agent_run_runs_with_run_id(server: ModelServer, store_url: str, provider: str) -> None:
    calls: list[str] = []
    lookup = _counted_lookup(calls)
    client = _client(server, provider)

    def ask(**where: Any) -> dnb.AgentResult:
        return dnb.agent(client, "Find the order.", [lookup], model="scripted", name="solo", store=store_url, **where)

    original = ask(run_key="nightly")
    run_id = _only_run(store_url, "solo")
    frame = dnb.history(run_id, store=store_url)
    turn_two = str(frame[frame["step"] == "turn:2"]["checkpoint_id"].iloc[0])
    # What if the user had asked something else? The history up to turn 2, with the question edited.
    edited = [dict(m) for m in original.messages[:3]]
    edited[0]["content"] = "Find the refund."
    fork = dnb.fork_agent(run_id, turn_two, messages=edited, store=store_url)
    assert fork.status == "pending" and fork.parent_run_id == run_id
    before = dict(server.requests)
    result = ask(run_id=fork.id)
    assert result.text == "done after 3 turns" and result.messages[0]["content"] == "Find the refund."
    # The fork asked from turn 2 on: turn 1 was answered in the original, not asked again.
    assert server.requests[(provider, 0)] == before[(provider, 0)] == 1
    assert [server.requests[(provider, t)] for t in (1, 2)] == [2, 2]
    assert calls == ["0,0", "1,0", "1,0"]
    assert dnb.get_run(fork.id, store=store_url).status == "completed"
    # Finished, the fork answers again without a request; the original run is untouched.
    asked = sum(server.requests.values())
    assert ask(run_id=fork.id).text == result.text and sum(server.requests.values()) == asked
    assert ask(run_key="nightly").messages == original.messages
    assert not server.refused, server.refused


def test_run_id_of_another_agent_names_it(server: ModelServer, store_url: str) -> None:
    client = openai_client(server)
    calls: list[str] = []
    dnb.agent(client, "Go.", [_counted_lookup(calls)], model="scripted", name="solo", store=store_url)
    run_id = _only_run(store_url, "solo")
    with pytest.raises(dnb.WorkflowMismatch, match="name='solo'"):
        dnb.agent(client, "Go.", model="scripted", name="other", store=store_url, run_id=run_id)
