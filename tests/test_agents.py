"""Agent nodes (issue 16): a checkpoint before every model turn and tool call, with the real SDKs.

The real ``openai`` and ``anthropic`` clients (sync and async) talk to the scripted model server
of ``agentkit``. Checked: the steps written (``turn:N``, ``turn:N/tool:<name>``, the final
``turn:N+1``), a tool's exact arguments in ``node_input``, agent paths, a gate inside a tool,
several calls in a turn when the first pauses, a failure after the loop, a tool's error
handed to the model, agents in map items and in notebook cells, and bad arguments.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentkit import ModelServer, Script, anthropic_client, openai_client

import durable_nb as dnb
from durable_nb.engine.agents.loop import NOT_RUN
from durable_nb.engine.agents.tools import tool


@pytest.fixture
def server() -> Iterator[ModelServer]:
    running = ModelServer(Script(turns=3, calls_per_turn=1, tools=("lookup",)))
    yield running
    running.close()


def _client(server: ModelServer, provider: str, asynchronous: bool = False) -> Any:
    return (openai_client if provider == "openai" else anthropic_client)(server, asynchronous)


def _steps(run_id: str, url: str) -> list[tuple[str, str | None]]:
    frame = dnb.history(run_id, store=url)
    return list(zip(frame["step"], frame["node_id"], strict=True))


def lookup(turn: int, k: int) -> str:
    """Look something up."""
    return f"found {turn}/{k}"


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_every_turn_and_tool_call_is_checkpointed_first(
    server: ModelServer, store_url: str, provider: str, asynchronous: bool
) -> None:
    flow = dnb.Workflow("agents", store=store_url)
    client = _client(server, provider, asynchronous)

    if asynchronous:

        @flow.node
        async def talk(state: dict[str, Any]) -> dict[str, Any]:
            result = await dnb.aagent(client, "Find it.", [lookup], model="scripted", name="finder")
            return {"answer": result.text, "turns": result.turns}

    else:

        @flow.node
        def talk(state: dict[str, Any]) -> dict[str, Any]:
            result = dnb.agent(client, "Find it.", [lookup], model="scripted", name="finder")
            return {"answer": result.text, "turns": result.turns}

    run = flow.run({})
    assert run.status == "completed", run.error
    assert run.state == {"answer": "done after 3 turns", "turns": 3}
    assert [s for s, _ in _steps(run.id, store_url)] == [
        "turn:1",
        "turn:1/tool:lookup",
        "turn:2",
        "turn:2/tool:lookup",
        "turn:3",
        "turn:4",
        "after:talk",
        "run_end",
    ]
    frame = dnb.history(run.id, store=store_url)
    tool_rows = frame[frame["step"] == "turn:1/tool:lookup"]
    checkpoint = tool_rows.iloc[0]
    record = dnb.get_run(run.id, store=store_url)
    assert record.status == "completed"
    stored = _checkpoint(store_url, run.id, str(checkpoint["checkpoint_id"]))
    assert stored.node_input["arguments"] == {"turn": 0, "k": 0}
    assert stored.agent_path == "agent:finder/tool:lookup"
    assert stored.extra["step_type"] == "tool_call"
    assert _checkpoint(store_url, run.id, str(frame.iloc[0]["checkpoint_id"])).extra["step_type"] == "llm_call"
    assert all(server.requests[(provider, t)] == 1 for t in range(3))
    assert list(frame["step_type"].astype(str)) == [
        "llm_call",
        "tool_call",
        "llm_call",
        "tool_call",
        "llm_call",
        "llm_call",
        "node",
        "node",
    ]


def _checkpoint(url: str, run_id: str, checkpoint_id: str) -> Any:
    from durable_nb._loop import run_sync

    return run_sync(dnb.connect(url).get_checkpoint(run_id, checkpoint_id))


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_gate_in_a_tool_pauses_and_its_decision_returns_into_that_tool(
    server: ModelServer, store_url: str, provider: str
) -> None:
    ran: list[str] = []

    def refund(turn: int, k: int) -> str:
        """Refund an order (a person approves)."""
        ran.append(f"refund {turn}/{k}")
        decision = dnb.gate("refund", {"turn": turn})
        return "refunded" if decision.approved else "refused"

    server.script = Script(turns=2, calls_per_turn=1, tools=("refund",))
    flow = dnb.Workflow("gated-agent", store=store_url)
    client = _client(server, provider)

    @flow.node
    def talk(state: dict[str, Any]) -> dict[str, Any]:
        return {"answer": dnb.agent(client, "Refund it.", [refund], model="scripted", name="support").text}

    run = flow.run({})
    assert run.status == "paused"
    assert run.pending_interrupt["agent_path"] == "agent:support/tool:refund"
    resumed = flow.approve(run.id, comment="ok")
    assert resumed.status == "completed", resumed.error
    # The tool ran again with the decision; the model was not asked that turn again.
    assert ran == ["refund 0/0", "refund 0/0"]
    assert server.requests[(provider, 0)] == 1 and server.requests[(provider, 1)] == 1
    history = dnb.get_run(run.id, store=store_url)
    assert history.status == "completed"
    assert not server.refused


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_siblings_of_a_paused_call_are_answered_not_run(server: ModelServer, store_url: str, provider: str) -> None:
    ran: list[str] = []

    def approve_it(turn: int, k: int) -> str:
        """Ask a person."""
        ran.append(f"approve {k}")
        return "yes" if dnb.gate("ok?").approved else "no"

    def side(turn: int, k: int) -> str:
        """A second call of the same turn."""
        ran.append(f"side {k}")
        return "side done"

    server.script = Script(turns=2, calls_per_turn=3, tools=("approve_it", "side"))
    flow = dnb.Workflow("siblings", store=store_url)
    client = _client(server, provider)
    seen: list[list[dict[str, Any]]] = []

    @flow.node
    def talk(state: dict[str, Any]) -> dict[str, Any]:
        result = dnb.agent(client, "Go.", [approve_it, side], model="scripted")
        seen.append(result.messages)
        return {"answer": result.text}

    run = flow.run({})
    assert run.status == "paused"
    assert ran == ["approve 0"]
    done = flow.approve(run.id)
    assert done.status == "completed", done.error
    # The paused call ran again with its decision; its two siblings never ran and were answered.
    assert ran == ["approve 0", "approve 0"]
    assert not server.refused, server.refused
    text = json.dumps(seen[-1])
    assert text.count("did not run") == 2
    assert NOT_RUN[:30] in text


def test_a_failure_after_the_loop_resumes_after_it(server: ModelServer, store_url: str) -> None:
    calls: list[str] = []

    def counted(turn: int, k: int) -> str:
        """A tool that counts its calls."""
        calls.append(f"{turn}/{k}")
        return "ok"

    server.script = Script(turns=3, calls_per_turn=1, tools=("counted",))
    flow = dnb.Workflow("after-loop", store=store_url)
    client = openai_client(server)
    attempts: list[int] = []

    @flow.node(retry_count=0)
    def talk(state: dict[str, Any]) -> dict[str, Any]:
        result = dnb.agent(client, "Go.", [counted], model="scripted")
        attempts.append(1)
        if len(attempts) == 1:
            raise ValueError("the answer could not be parsed")
        return {"answer": result.text}

    run = flow.run({})
    assert run.status == "failed" and "could not be parsed" in (run.error or "")
    steps = [s for s, _ in _steps(run.id, store_url)]
    assert steps[-3:] == ["turn:4", "failed:talk", "run_end"]
    requests = sum(server.requests.values())
    resumed = flow.resume(run.id)
    assert resumed.status == "completed" and resumed.state["answer"] == "done after 3 turns"
    # Re-entered after the loop: no model request, no tool call again.
    assert sum(server.requests.values()) == requests
    assert calls == ["0/0", "1/0"]


def test_a_tool_error_goes_back_to_the_model(store_url: str) -> None:
    def broken(x: int) -> int:
        """Always fails."""
        raise RuntimeError("disk on fire")

    answers: list[str] = []

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        results = [m for m in messages if m["role"] == "tool"]
        if not results:
            call = {"id": "c1", "type": "function", "function": {"name": "broken", "arguments": '{"x": 1}'}}
            return {"role": "assistant", "content": None, "tool_calls": [call]}
        answers.append(results[0]["content"])
        return "gave up"

    flow = dnb.Workflow("tool-error", store=store_url)

    @flow.node
    def talk(state: dict[str, Any]) -> dict[str, Any]:
        return {"answer": dnb.agent(model, "Try.", [broken]).text}

    run = flow.run({})
    assert run.status == "completed"
    assert answers == ["broken failed: RuntimeError: disk on fire"]


def test_agents_in_map_items_keep_their_own_checkpoints(store_url: str) -> None:
    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        if not any(m["role"] == "tool" for m in messages):
            call = {
                "id": "c",
                "type": "function",
                "function": {"name": "echo", "arguments": json.dumps({"x": messages[0]["content"]})},
            }
            return {"role": "assistant", "content": None, "tool_calls": [call]}
        return "echoed " + messages[-1]["content"]

    def echo(x: str) -> str:
        """Echo x."""
        return x

    flow = dnb.Workflow("mapped-agents", store=store_url)

    @flow.map(items="words", into="echoes")
    def each(state: dict[str, Any], word: str) -> str:
        return dnb.agent(model, word, [echo]).text

    run = flow.run({"words": ["a", "b", "c"]})
    assert run.status == "completed"
    assert run.state["echoes"] == ["echoed a", "echoed b", "echoed c"]
    frame = dnb.history(run.id, store=store_url)
    paths = set(frame["agent_path"].dropna())
    assert {"item:0/agent:agent", "item:1/agent:agent", "item:2/agent:agent"} <= paths
    assert {"item:0/agent:agent/tool:echo", "item:2/agent:agent/tool:echo"} <= paths


def test_tool_schema_comes_from_hints_and_docstring() -> None:
    def search(query: str, limit: int = 5, tags: list[str] | None = None) -> str:
        """Search the documents.

        Args:
            query: what to look for
            limit: how many results
        """
        return ""

    described = tool(search)
    assert described.description == "Search the documents."
    assert described.parameters == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "what to look for"},
            "limit": {"type": "integer", "description": "how many results"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["query"],
    }


@pytest.mark.parametrize(
    ("call", "error", "fragment"),
    [
        pytest.param(lambda: tool(5), dnb.ConfigurationError, "a function", id="tool-not-function"),
        pytest.param(lambda: tool(lambda: 1, name="bad name!"), dnb.ConfigurationError, "letters", id="tool-bad-name"),
        pytest.param(
            lambda: tool(lookup, parameters={"type": "string"}),
            dnb.ConfigurationError,
            "object",
            id="tool-schema-not-object",
        ),
    ],
)
def test_bad_agent_arguments(call: Any, error: type[Exception], fragment: str) -> None:
    with pytest.raises(error, match=fragment):
        call()


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        pytest.param({"client": 5}, "client=", id="client-int"),
        pytest.param({"max_turns": 0}, "max_turns", id="max-turns-zero"),
        pytest.param({"name": "a/b"}, "name", id="name-with-slash"),
        pytest.param({"tools": [lookup, lookup]}, "Two tools", id="duplicate-tools"),
        pytest.param({"model_kw": True}, "model=", id="openai-without-model"),
        pytest.param({"run_id": "r"}, "run_id=", id="run-id-inside-a-node"),
    ],
)
def test_bad_agent_arguments_fail_the_node(
    server: ModelServer, store_url: str, kwargs: dict[str, Any], fragment: str
) -> None:
    flow = dnb.Workflow("bad-agent", store=store_url)
    options: dict[str, Any] = {"client": lambda m, t: "x", "messages": "hi"}
    kwargs = dict(kwargs)  # the parameters are shared by both backends' runs of this test
    if kwargs.pop("model_kw", False):
        options["client"] = openai_client(server)
    options.update(kwargs)

    @flow.node(retry_count=0)
    def talk(state: dict[str, Any]) -> dict[str, Any]:
        return {"answer": dnb.agent(**options).text}

    run = flow.run({})
    assert run.status == "failed" and "ConfigurationError" in (run.error or "") and fragment in (run.error or "")


def test_max_turns_fails_typed_and_resume_goes_on(server: ModelServer, store_url: str) -> None:
    server.script = Script(turns=4, calls_per_turn=1, tools=("lookup",))
    flow = dnb.Workflow("few-turns", store=store_url)
    client = openai_client(server)
    limit = {"turns": 2}

    @flow.node(retry_count=0)
    def talk(state: dict[str, Any]) -> dict[str, Any]:
        return {"answer": dnb.agent(client, "Go.", [lookup], model="scripted", max_turns=limit["turns"]).text}

    run = flow.run({})
    assert run.status == "failed" and "AgentFailed" in (run.error or "") and "max_turns" in (run.error or "")
    before = dict(server.requests)
    limit["turns"] = 10
    done = flow.resume(run.id)
    assert done.status == "completed" and done.state["answer"] == "done after 4 turns"
    # The turns already answered were not asked again.
    assert all(server.requests[k] == v for k, v in before.items())


def _refund_tool(calls: Path) -> Any:
    def refund(turn: int, k: int) -> str:
        """Refund an order (a side effect: each call is written down)."""
        with calls.open("a") as handle:
            handle.write(f"{turn},{k}\n")
        return f"refunded {turn}/{k}"

    return refund


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_using_up_max_turns_keeps_the_last_turns_tool_results(
    server: ModelServer, store_url: str, provider: str, tmp_path: Path
) -> None:
    server.script = Script(turns=4, calls_per_turn=2, tools=("refund",))
    calls = tmp_path / "refunds.txt"
    refund = _refund_tool(calls)
    flow = dnb.Workflow("refunds", store=store_url)
    client = _client(server, provider)
    limit = {"turns": 2}

    @flow.node(retry_count=0)
    def talk(state: dict[str, Any]) -> dict[str, Any]:
        return {"answer": dnb.agent(client, "Refund.", [refund], model="scripted", max_turns=limit["turns"]).text}

    run = flow.run({})
    assert run.status == "failed" and "max_turns" in (run.error or ""), run.error
    # The last turn's results are committed before the run stops: the next turn's checkpoint is the last.
    steps = [s for s, _ in _steps(run.id, store_url)]
    assert steps[-3:] == ["turn:3", "failed:talk", "run_end"], steps
    assert calls.read_text().split() == ["0,0", "0,1", "1,0", "1,1"]
    # Resumed with the same limit: refused at once, no model request, no tool call.
    again = flow.resume(run.id)
    assert again.status == "failed" and "max_turns" in (again.error or "")
    assert calls.read_text().split() == ["0,0", "0,1", "1,0", "1,1"]
    assert sum(server.requests.values()) == 2
    limit["turns"] = 10
    done = flow.resume(run.id)
    assert done.status == "completed", done.error
    assert done.state["answer"] == "done after 4 turns"
    # Every refund ran exactly once per request, every turn was asked once.
    assert calls.read_text().split() == ["0,0", "0,1", "1,0", "1,1", "2,0", "2,1"]
    assert [server.requests[(provider, t)] for t in range(4)] == [1, 1, 1, 1]
    assert not server.refused, server.refused


def test_a_standalone_agent_out_of_turns_goes_on_with_its_key(
    server: ModelServer, store_url: str, tmp_path: Path
) -> None:
    server.script = Script(turns=3, calls_per_turn=1, tools=("refund",))
    calls = tmp_path / "refunds.txt"
    refund = _refund_tool(calls)
    client = openai_client(server)

    def ask(max_turns: int) -> dnb.AgentResult:
        return dnb.agent(
            client, "Refund.", [refund], model="scripted", max_turns=max_turns, store=store_url, run_key="r"
        )

    with pytest.raises(dnb.AgentFailed, match="max_turns"):
        ask(1)
    assert calls.read_text().split() == ["0,0"]
    with pytest.raises(dnb.AgentFailed, match="max_turns"):
        ask(1)
    assert calls.read_text().split() == ["0,0"] and sum(server.requests.values()) == 1
    assert ask(5).text == "done after 3 turns"
    assert calls.read_text().split() == ["0,0", "1,0"]
    assert [server.requests[("openai", t)] for t in range(3)] == [1, 1, 1]


def test_an_agent_in_a_durable_cell(server: ModelServer, tmp_path: Path) -> None:
    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython()
    url = f"sqlite:///{tmp_path}/cells.db"
    shell.run_line_magic("load_ext", "durable_nb")
    shell.run_line_magic("durable", f"run cell-agent --store {url} --new")
    shell.user_ns.update(client=openai_client(server), lookup=lookup)
    result = shell.run_cell(
        "%%durable ask\nimport durable_nb as dnb\nreply = dnb.agent(client, 'Go.', [lookup], model='scripted')\n"
    )
    assert result.success, result.error_in_exec
    assert shell.user_ns["reply"].text == "done after 3 turns"
    run_id = str(dnb.runs("cell-agent", store=url).run_id.iloc[0])
    steps = [s for s, _ in _steps(run_id, url)]
    assert steps[:3] == ["turn:1", "turn:1/tool:lookup", "turn:2"] and "after:ask" in steps


def test_two_agents_of_one_name_in_one_node_keep_their_own_checkpoints(store_url: str) -> None:
    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        return "answer to " + messages[0]["content"]

    flow = dnb.Workflow("twice", store=store_url)
    runs: list[int] = []

    @flow.node(retry_count=1)
    def talk(state: dict[str, Any]) -> dict[str, Any]:
        first = dnb.agent(model, "one").text
        second = dnb.agent(model, "two").text
        runs.append(1)
        if len(runs) == 1:
            raise RuntimeError("fails once, after both agents answered")
        return {"answers": [first, second]}

    run = flow.run({})
    assert run.status == "completed", run.error
    assert run.state["answers"] == ["answer to one", "answer to two"]
    paths = set(dnb.history(run.id, store=store_url)["agent_path"].dropna())
    assert paths == {"agent:agent", "agent:agent#2"}


def test_an_agent_outside_any_node_is_a_run_of_its_own(server: ModelServer, store_url: str) -> None:
    client = openai_client(server)
    first = dnb.agent(client, "Find it.", [lookup], model="scripted", name="solo", store=store_url, run_key="k1")
    assert first.text == "done after 3 turns" and first.turns == 3
    asked = sum(server.requests.values())
    again = dnb.agent(client, "Find it.", [lookup], model="scripted", name="solo", store=store_url, run_key="k1")
    # The same key finds the finished run: its answer, no model request.
    assert again.text == first.text and sum(server.requests.values()) == asked
    runs = dnb.runs("agent:solo", store=store_url)
    assert len(runs) == 1 and runs["status"].iloc[0] == "completed"
    # Inside a node the agent belongs to the node's run: a key of its own is refused.
    flow = dnb.Workflow("inside", store=store_url)

    @flow.node(retry_count=0)
    def talk(state: dict[str, Any]) -> dict[str, Any]:
        return {"a": dnb.agent(client, "x", model="scripted", run_key="nope").text}

    run = flow.run({})
    assert run.status == "failed" and "ConfigurationError" in (run.error or "") and "run_key" in (run.error or "")


def test_a_standalone_agent_killed_mid_request_resumes_with_its_key(server: ModelServer, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    script = tmp_path / "solo.py"
    script.write_text(
        "import os, sys, openai, durable_nb as dnb\n"
        "def lookup(turn: int, k: int) -> str:\n"
        '    """Look something up."""\n'
        "    return f'found {turn}'\n"
        "client = openai.OpenAI(base_url=sys.argv[1] + '/v1', api_key='t', max_retries=0,\n"
        "                       default_headers={'x-kill-pid': str(os.getpid())})\n"
        "reply = dnb.agent(client, 'Go.', [lookup], model='scripted', name='solo', run_key='nightly',\n"
        "                  store='sqlite:///' + sys.argv[2])\n"
        "print(reply.text)\n"
    )
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=str(root))
    server.kill_at = {1}
    argv = [sys.executable, str(script), server.url, str(tmp_path / "solo.db")]
    killed = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "done after 3 turns"
    assert [server.requests[("openai", t)] for t in range(3)] == [1, 2, 1]


SUPERVISED = '''
import json, os, pathlib, signal, sys
import durable_nb as dnb

STORE, LOG, FLAG = sys.argv[1], sys.argv[2], sys.argv[3]


def log(line):
    with open(LOG, "a") as handle:
        handle.write(line + "\\n")


def call(name, arguments, ident):
    return {"id": ident, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def boss_model(messages, tools):
    done = [m for m in messages if m["role"] == "tool"]
    log("boss %d" % len(done))
    if len(done) < 2:
        task = ["find apples", "find pears"][len(done)]
        asked = call("researcher", {"task": task}, "b%d" % len(done))
        return {"role": "assistant", "content": None, "tool_calls": [asked]}
    return "report: " + " | ".join(m["content"] for m in done)


def researcher_model(messages, tools):
    task = messages[0]["content"]
    done = [m for m in messages if m["role"] == "tool"]
    log("researcher %s %d" % (task, len(done)))
    if not done:
        return {"role": "assistant", "content": None, "tool_calls": [call("search", {"q": task}, "r0")]}
    return "found " + done[0]["content"]


def search(q: str) -> str:
    """Search."""
    log("search " + q)
    if q == "find pears" and not pathlib.Path(FLAG).exists():
        pathlib.Path(FLAG).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return q.split()[-1]


flow = dnb.Workflow("supervised", store=STORE)
researcher = dnb.worker(researcher_model, [search], name="researcher", description="Finds things.")


@flow.node(retry_count=0)
def work(state):
    return {"report": dnb.agent(boss_model, "Report on fruit.", [researcher], name="boss").text}


if sys.argv[4] == "run":
    print(flow.run({}).state["report"])
else:
    print(flow.resume(dnb.runs("supervised", store=STORE).run_id.iloc[0]).state["report"])
'''


def test_a_supervisor_and_its_worker_resume_inside_the_worker(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys
    from collections import Counter

    script = tmp_path / "supervised.py"
    script.write_text(SUPERVISED)
    url, log = f"sqlite:///{tmp_path}/s.db", tmp_path / "log.txt"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    argv = [sys.executable, str(script), url, str(log), str(tmp_path / "flag")]
    killed = subprocess.run([*argv, "run"], env=env, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9, killed.stderr[-2000:]
    done = subprocess.run([*argv, "resume"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "report: found apples | found pears"
    asked = Counter(log.read_text().splitlines())
    # The first worker call finished before the kill: neither it nor the boss's turns before it ran again.
    assert asked["boss 0"] == 1 and asked["boss 1"] == 1 and asked["boss 2"] == 1
    assert asked["researcher find apples 0"] == 1 and asked["researcher find apples 1"] == 1
    assert asked["search find apples"] == 1
    # The second call was inside its tool: that search ran again (in flight), its model turn did not.
    assert asked["researcher find pears 0"] == 1 and asked["search find pears"] == 2
    run_id = str(dnb.runs("supervised", store=url).run_id.iloc[0])
    paths = set(dnb.history(run_id, store=url)["agent_path"].dropna())
    assert {
        "supervisor:boss",
        "supervisor:boss/tool:researcher",
        "supervisor:boss/worker:researcher",
        "supervisor:boss/worker:researcher/tool:search",
    } == paths
