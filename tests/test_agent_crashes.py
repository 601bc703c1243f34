"""Agent crash tests (issue 16): real SIGKILLs at random points of a 10-turn, 20-tool-call exchange.

A child process runs a workflow whose node runs ``dnb.agent`` with the real ``openai`` or
``anthropic`` client against the scripted model server. The test picks kill points at random
(seeded): in the middle of a model request (the server kills the client instead of answering),
or inside a tool, before or after its side effect. The child is resumed after each kill. Counted
per address afterwards: only the address in flight at a kill ran again. The ``pay`` tool charges
through ``@dnb.idempotent`` and is killed after charging: the charge happens once. A child killed
the moment its agent has used up ``max_turns`` leaves the last turn's tool results committed: resumed,
no tool call runs again.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from agentkit import ModelServer, Script

ROOT = Path(__file__).resolve().parent.parent
TURNS = 11  # ten turns of two tool calls each, then the answer
CALLS = 2

FLOW = """
import os, signal, sys
import durable_nb as dnb

STORE, SIDE, CHARGES, URL, PROVIDER = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
KILL = os.environ.get("KILL_TOOL", "")  # "<turn>,<k>,before|after"
MAX_TURNS = int(os.environ.get("MAX_TURNS", "20"))

if os.environ.get("KILL_AT_LIMIT"):
    # Injected failure: die the moment the agent finds its turns used up.
    from durable_nb.engine.agents import loop

    class KilledAtLimit(dnb.AgentFailed):
        def __init__(self, *args):
            os.kill(os.getpid(), signal.SIGKILL)

    loop.AgentFailed = KilledAtLimit


def note(path, line):
    with open(path, "a") as handle:
        handle.write(line + "\\n")
        handle.flush()
        os.fsync(handle.fileno())


def maybe_die(turn, k, moment):
    if KILL == "%d,%d,%s" % (turn, k, moment):
        os.kill(os.getpid(), signal.SIGKILL)


@dnb.idempotent
def charge(turn, k):
    note(CHARGES, "%d,%d" % (turn, k))
    return "receipt-%d-%d" % (turn, k)


def lookup(turn: int, k: int) -> str:
    \"\"\"Look something up.\"\"\"
    maybe_die(turn, k, "before")
    note(SIDE, "%d,%d" % (turn, k))
    maybe_die(turn, k, "after")
    return "found %d/%d" % (turn, k)


def pay(turn: int, k: int) -> str:
    \"\"\"Pay for something (charged once per turn and call).\"\"\"
    maybe_die(turn, k, "before")
    note(SIDE, "%d,%d" % (turn, k))
    receipt = charge(turn, k)
    maybe_die(turn, k, "after")
    return receipt


def client():
    headers = {"x-kill-pid": str(os.getpid())}
    if PROVIDER == "openai":
        import openai
        return openai.OpenAI(base_url=URL + "/v1", api_key="t", max_retries=0, default_headers=headers)
    import anthropic
    return anthropic.Anthropic(base_url=URL, api_key="t", max_retries=0, default_headers=headers)


flow = dnb.Workflow("agent-crash", store=STORE)


@flow.node(retry_count=0)
def talk(state):
    result = dnb.agent(client(), "Look up and pay.", [lookup, pay], model="scripted", max_turns=MAX_TURNS)
    return {"answer": result.text, "turns": result.turns}


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run = flow.run({}, idempotency_key="the-one")
    else:
        run = flow.resume(dnb.runs("agent-crash", store=STORE).run_id.iloc[0])
    print(run.status, run.state.get("answer"), flush=True)
"""


def _points(seed: int, kills: int) -> list[tuple[Any, ...]]:
    """Random kill points, in the order the exchange reaches them."""
    rng = random.Random(seed)
    order: list[tuple[Any, ...]] = []
    for turn in range(TURNS):
        order.append(("model", turn))
        if turn < TURNS - 1:
            for k in range(CALLS):
                order.append(("tool", turn, k, "before"))
                order.append(("tool", turn, k, "after"))
    chosen = sorted(rng.sample(range(len(order)), kills))
    return [order[i] for i in chosen]


def _harness(
    tmp_path: Path, store_url: str, provider: str
) -> tuple[ModelServer, Path, Path, dict[str, str], list[str]]:
    """The model server, the files the tools and charges write to, the child's environment and arguments."""
    server = ModelServer(Script(turns=TURNS, calls_per_turn=CALLS, tools=("lookup", "pay")))
    script = tmp_path / "agent_flow.py"
    script.write_text(FLOW)
    side, charges = tmp_path / "side.txt", tmp_path / "charges.txt"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    args = [str(script), "run", store_url, str(side), str(charges), server.url, provider]
    return server, side, charges, env, args


def _provider(store_url: str, on_sqlite: str) -> str:
    """The provider a test pairs with this backend; the other backend gets the other provider."""
    other = {"openai": "anthropic", "anthropic": "openai"}[on_sqlite]
    return on_sqlite if store_url.startswith("sqlite") else other


# One provider per backend, and the other pairing in the max_turns test below: every provider meets
# every backend, at half the child processes (the anthropic SDK alone takes seconds to import in each).
# The adapters' differences are covered in process, both providers on both backends, in test_agents.py.
def test_kills_repeat_only_the_address_in_flight(tmp_path: Path, store_url: str) -> None:
    provider = _provider(store_url, on_sqlite="openai")
    kills = 8 if store_url.startswith("sqlite") else 4
    server, side, charges, env, args = _harness(tmp_path, store_url, provider)
    points = _points(seed={"openai": 11, "anthropic": 23}[provider] + kills, kills=kills)
    try:
        first = True
        for point in points:
            env.pop("KILL_TOOL", None)
            if point[0] == "model":
                server.kill_at = {point[1]}
            else:
                env["KILL_TOOL"] = f"{point[1]},{point[2]},{point[3]}"
            args[1] = "run" if first else "resume"
            first = False
            done = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=300)
            assert done.returncode == -9, (point, done.stdout, done.stderr[-2000:])
        env.pop("KILL_TOOL", None)
        server.kill_at = set()
        args[1] = "resume" if not first else "run"
        done = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split()[0] == "completed", done.stdout
        assert f"done after {TURNS} turns" in done.stdout
    finally:
        server.close()
    assert not server.refused, server.refused
    model_kills = Counter(p[1] for p in points if p[0] == "model")
    for turn in range(TURNS):
        # A turn the model answered is never asked again; one killed mid-request is asked once more.
        assert server.requests[(provider, turn)] == 1 + model_kills[turn], (turn, server.requests, points)
    effects = Counter(side.read_text().split())
    after_kills = Counter(f"{p[1]},{p[2]}" for p in points if p[0] == "tool" and p[3] == "after")
    for turn in range(TURNS - 1):
        for k in range(CALLS):
            address = f"{turn},{k}"
            # A tool body runs once, or twice when it was killed after its effect (the one in flight).
            assert effects[address] == 1 + after_kills[address], (address, effects, points)
    paid = Counter(charges.read_text().split())
    assert paid and all(count == 1 for count in paid.values()), paid


def test_a_kill_when_max_turns_is_used_up_repeats_no_tool_call(tmp_path: Path, store_url: str) -> None:
    provider = _provider(store_url, on_sqlite="anthropic")
    server, side, charges, env, args = _harness(tmp_path, store_url, provider)
    limit = 4

    def child(command: str, **extra: str) -> subprocess.CompletedProcess[str]:
        args[1] = command
        return subprocess.run(
            [sys.executable, *args], env={**env, **extra}, capture_output=True, text=True, timeout=300
        )

    try:
        killed = child("run", MAX_TURNS=str(limit), KILL_AT_LIMIT="1")
        assert killed.returncode == -9, killed.stderr[-2000:]
        ran = sorted(side.read_text().split())
        # Resumed with the same limit: it stops again, asking nothing and calling nothing.
        refused = child("resume", MAX_TURNS=str(limit))
        assert refused.returncode == 0, refused.stderr[-2000:]
        assert refused.stdout.split()[0] == "failed", refused.stdout
        assert sorted(side.read_text().split()) == ran
        done = child("resume")
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.split()[0] == "completed", done.stdout
    finally:
        server.close()
    assert not server.refused, server.refused
    assert [server.requests[(provider, t)] for t in range(TURNS)] == [1] * TURNS
    effects = Counter(side.read_text().split())
    assert effects == Counter(f"{t},{k}" for t in range(TURNS - 1) for k in range(CALLS)), effects
    paid = Counter(charges.read_text().split())
    assert len(paid) == TURNS - 1 and all(count == 1 for count in paid.values()), paid
