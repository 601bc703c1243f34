"""Agents: paid calls redone after a crash, and what a checkpoint per turn costs.

A 10-turn exchange (two tool calls per turn, then the answer) against the scripted model server
(``durable_nb.demo.model_server``), run by each contender in a child process:

- durable_nb: ``dnb.agent`` in a workflow node, on SQLite (synchronous=FULL);
- LangGraph: the prebuilt ReAct agent (``create_react_agent``, ``ChatOpenAI``) with a
  SqliteSaver and ``durability="sync"``;
- DBOS: a workflow whose model calls and tool calls are steps, on its SQLite system database.

Crashes: the same seeded random kill points for every contender (a SIGKILL during a model
request, or inside a tool before or after its side effect); after each kill the contender
resumes as its documentation says. Counted afterwards: model requests and tool bodies beyond
one per address, per kill. Overhead: the exchange without kills, per turn, against the same
loop with no durability at all (whose time is the model server's own latency plus the tools).

``python -m benchmarks.agents [--kills 20] [--reps 5]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TURNS = 11  # ten turns of two tool calls, then the answer
CALLS = 2
CONTENDERS = ("durable_nb", "langgraph", "dbos")

CHILD = r'''
import json, os, signal, sys, time
URL, FOLDER, CONTENDER, MODE = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
KILL = os.environ.get("KILL_TOOL", "")
HEADERS = {"x-kill-pid": str(os.getpid())}
PROMPT = "Look up and pay."


def note(line):
    with open(os.path.join(FOLDER, "effects.txt"), "a") as handle:
        handle.write(line + "\n")


def maybe_die(turn, k, moment):
    if KILL == "%d,%d,%s" % (turn, k, moment):
        os.kill(os.getpid(), signal.SIGKILL)


def lookup(turn: int, k: int) -> str:
    """Look something up."""
    maybe_die(turn, k, "before")
    note("%d,%d" % (turn, k))
    maybe_die(turn, k, "after")
    return "found %d/%d" % (turn, k)


def pay(turn: int, k: int) -> str:
    """Pay for something."""
    maybe_die(turn, k, "before")
    note("%d,%d" % (turn, k))
    maybe_die(turn, k, "after")
    return "paid %d/%d" % (turn, k)


TOOLS = {"lookup": lookup, "pay": pay}


def plain():
    import openai
    client = openai.OpenAI(base_url=URL + "/v1", api_key="t", max_retries=0, default_headers=HEADERS)
    schemas = [{"type": "function", "function": {"name": n, "description": f.__doc__, "parameters": {
        "type": "object", "properties": {"turn": {"type": "integer"}, "k": {"type": "integer"}},
        "required": ["turn", "k"]}}} for n, f in TOOLS.items()]
    def go():
        return loop(client, schemas)

    return go


def loop(client, schemas):
    history = [{"role": "user", "content": PROMPT}]
    while True:
        message = client.chat.completions.create(model="scripted", messages=history, tools=schemas).choices[0].message
        calls = message.tool_calls or []
        history.append({"role": "assistant", "content": message.content, "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in calls] or None})
        if not calls:
            return message.content
        for c in calls:
            history.append({"role": "tool", "tool_call_id": c.id,
                            "content": TOOLS[c.function.name](**json.loads(c.function.arguments))})


def durable_nb():
    import durable_nb as dnb
    import openai
    flow = dnb.Workflow("agent-bench", store="sqlite:///" + os.path.join(FOLDER, "durable_nb.db"))
    client = openai.OpenAI(base_url=URL + "/v1", api_key="t", max_retries=0, default_headers=HEADERS)

    @flow.node(retry_count=0)
    def talk(state):
        return {"answer": dnb.agent(client, PROMPT, [lookup, pay], model="scripted", max_turns=50).text}

    dnb.runs(store=flow.store)  # the store is opened and its tables made before the clock starts

    def go():
        if MODE == "run":
            return flow.run({}, idempotency_key="bench").state["answer"]
        return flow.resume(dnb.runs("agent-bench", store=flow.store).run_id.iloc[0]).state["answer"]

    return go


def langgraph():
    import sqlite3
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.prebuilt import create_react_agent
    model = ChatOpenAI(base_url=URL + "/v1", api_key="t", model="scripted", max_retries=0, default_headers=HEADERS)
    saver = SqliteSaver(sqlite3.connect(os.path.join(FOLDER, "langgraph.db"), check_same_thread=False))
    saver.setup()  # its tables made before the clock starts
    app = create_react_agent(model, [lookup, pay], checkpointer=saver)
    config = {"configurable": {"thread_id": "bench"}, "recursion_limit": 200}
    def go():
        state = app.invoke({"messages": [("user", PROMPT)]} if MODE == "run" else None, config, durability="sync")
        return state["messages"][-1].content

    return go


def dbos():
    import openai
    from dbos import DBOS, SetWorkflowID
    DBOS(config={"name": "agent-bench", "system_database_url": "sqlite:///" + os.path.join(FOLDER, "dbos.db"),
                 "log_level": "ERROR"})
    client = openai.OpenAI(base_url=URL + "/v1", api_key="t", max_retries=0, default_headers=HEADERS)
    schemas = [{"type": "function", "function": {"name": n, "description": f.__doc__, "parameters": {
        "type": "object", "properties": {"turn": {"type": "integer"}, "k": {"type": "integer"}},
        "required": ["turn", "k"]}}} for n, f in TOOLS.items()]

    @DBOS.step()
    def ask(history):
        message = client.chat.completions.create(model="scripted", messages=history, tools=schemas).choices[0].message
        calls = [
            {"id": c.id, "type": "function",
             "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in (message.tool_calls or [])
        ]
        return {"role": "assistant", "content": message.content, **({"tool_calls": calls} if calls else {})}

    @DBOS.step()
    def call_tool(name, arguments):
        return TOOLS[name](**json.loads(arguments))

    @DBOS.workflow()
    def agent(prompt):
        history = [{"role": "user", "content": prompt}]
        while True:
            message = ask(history)
            history.append(message)
            if not message.get("tool_calls"):
                return message["content"]
            for c in message["tool_calls"]:
                history.append({"role": "tool", "tool_call_id": c["id"],
                                "content": call_tool(c["function"]["name"], c["function"]["arguments"])})

    if MODE == "run":
        DBOS.launch()  # its system database made before the clock starts

    def go():
        if MODE == "run":
            with SetWorkflowID("bench"):
                return agent(PROMPT)
        DBOS.launch()  # a pending workflow of this executor is recovered here
        return DBOS.retrieve_workflow("bench").get_result()

    return go


# Imports and set-up first: only the exchange itself is timed.
go = {"plain": plain, "durable_nb": durable_nb, "langgraph": langgraph, "dbos": dbos}[CONTENDER]()
started = time.perf_counter()
answer = go()
print(json.dumps({"answer": answer, "seconds": time.perf_counter() - started}), flush=True)
os._exit(0)  # no exit handlers: a library's shutdown is not part of the measure
'''


def kill_points(seed: int, kills: int) -> list[tuple[Any, ...]]:
    """``kills`` random points of the exchange, in the order it reaches them."""
    order: list[tuple[Any, ...]] = []
    for turn in range(TURNS):
        order.append(("model", turn))
        if turn < TURNS - 1:
            for k in range(CALLS):
                order += [("tool", turn, k, "before"), ("tool", turn, k, "after")]
    return [order[i] for i in sorted(random.Random(seed).sample(range(len(order)), min(kills, len(order))))]


def _child(script: Path, server: Any, folder: Path, contender: str, mode: str, kill: str | None) -> Any:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("KILL_TOOL", None)
    if kill:
        env["KILL_TOOL"] = kill
    return subprocess.run(
        [sys.executable, str(script), server.url, str(folder), contender, mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def crash_run(contender: str, kills: int, seed: int, root: Path) -> dict[str, Any]:
    """Kill one contender's exchange at the kill points, resume after each; count what ran again."""
    from durable_nb.demo.model_server import ModelServer, Script

    folder = root / f"crash-{contender}"
    folder.mkdir()
    script = folder / "agent_child.py"
    script.write_text(CHILD)
    server = ModelServer(Script(turns=TURNS, calls_per_turn=CALLS, tools=("lookup", "pay")))
    points = kill_points(seed, kills)
    landed = 0
    try:
        for index, point in enumerate(points):
            server.kill_at = {point[1]} if point[0] == "model" else set()
            kill = None if point[0] == "model" else f"{point[1]},{point[2]},{point[3]}"
            done = _child(script, server, folder, contender, "run" if index == 0 else "resume", kill)
            if done.returncode == -9:
                landed += 1
            elif done.returncode != 0:
                raise RuntimeError(f"{contender} failed at {point}: {done.stderr[-1500:]}")
        server.kill_at = set()
        final = _child(script, server, folder, contender, "resume" if points else "run", None)
        if final.returncode != 0:
            raise RuntimeError(f"{contender} did not finish: {final.stderr[-1500:]}")
        answer = json.loads(final.stdout.strip().splitlines()[-1])["answer"]
    finally:
        server.close()
    effects = Counter((folder / "effects.txt").read_text().split()) if (folder / "effects.txt").exists() else Counter()
    model_extra = sum(count - 1 for count in server.requests.values())
    tool_extra = sum(count - 1 for count in effects.values())
    return {
        "contender": contender,
        "kills": landed,
        "finished": answer == f"done after {TURNS} turns",
        "model_calls_redone": model_extra,
        "tool_calls_redone": tool_extra,
        "model_per_kill": model_extra / landed if landed else 0.0,
        "tools_per_kill": tool_extra / landed if landed else 0.0,
        "refused": len(server.refused),
    }


def overhead(contender: str, reps: int, root: Path, delay: float) -> float:
    """Median seconds of the whole exchange without kills (child start-up excluded)."""
    from durable_nb.demo.model_server import ModelServer, Script

    times = []
    for rep in range(reps):
        folder = root / f"time-{contender}-{rep}"
        folder.mkdir()
        script = folder / "agent_child.py"
        script.write_text(CHILD)
        server = ModelServer(Script(turns=TURNS, calls_per_turn=CALLS, tools=("lookup", "pay")))
        server.delay = delay
        try:
            done = _child(script, server, folder, contender, "run", None)
        finally:
            server.close()
        if done.returncode != 0:
            raise RuntimeError(f"{contender} failed: {done.stderr[-1500:]}")
        times.append(json.loads(done.stdout.strip().splitlines()[-1])["seconds"])
    return statistics.median(times)


def installed() -> tuple[str, ...]:
    """The contenders whose libraries are installed (durable_nb always)."""
    import importlib.util

    needs = {"langgraph": ("langgraph", "langchain_openai"), "dbos": ("dbos",)}
    found = ["durable_nb"]
    found += [name for name, modules in needs.items() if all(importlib.util.find_spec(m) for m in modules)]
    return tuple(found)


def agents_scenario(
    kills: int, reps: int, contenders: tuple[str, ...], seed: int = 7, delay: float = 0.0
) -> dict[str, Any]:
    """Run the crash and overhead measures for ``contenders``; return rows and the plain loop's time."""
    with tempfile.TemporaryDirectory(prefix="dnb-agents-") as temp:
        root = Path(temp)
        plain = overhead("plain", reps, root, delay)
        rows = []
        for contender in contenders:
            row = crash_run(contender, kills, seed, root)
            seconds = overhead(contender, reps, root, delay)
            row["ms_per_turn"] = seconds / TURNS * 1000
            row["overhead_ms_per_turn"] = (seconds - plain) / TURNS * 1000
            rows.append(row)
    return {
        "turns": TURNS,
        "tool_calls": (TURNS - 1) * CALLS,
        "kill_points": kills,
        "plain_ms_per_turn": plain / TURNS * 1000,
        "server_delay_ms": delay * 1000,
        "rows": rows,
    }


def render(result: dict[str, Any]) -> str:
    """The scenario as a Markdown table."""
    lines = [
        f"**Agents: paid calls redone after a crash** ({result['turns']} turns, {result['tool_calls']} tool calls, "
        f"{result['kill_points']} random kill points, the same for each)",
        "",
        "| contender | kills | model calls redone | tool calls redone | per kill (model + tools) | ms/turn | "
        "checkpoint overhead ms/turn |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        per_kill = row["model_per_kill"] + row["tools_per_kill"]
        lines.append(
            f"| {row['contender']} | {row['kills']} | {row['model_calls_redone']} | {row['tool_calls_redone']} | "
            f"{per_kill:.2f} | {row['ms_per_turn']:.1f} | {row['overhead_ms_per_turn']:.1f} |"
        )
    lines.append("")
    lines.append(
        f"The same exchange with no durability at all: {result['plain_ms_per_turn']:.1f} ms per turn "
        "(the model server's latency and the tools)."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the agents scenario and print its table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds the model server waits per request")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    result = agents_scenario(args.kills, args.reps, installed(), delay=args.delay)
    print(render(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
