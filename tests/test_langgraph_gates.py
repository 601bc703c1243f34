"""A LangGraph interrupt() as a durable_nb gate (issue 19 item 3), on SQLite and PostgreSQL.

A real graph stops at interrupt(): graph_gate_panel() shows Approve / Reject for it, and a
click records the decision once and resumes the graph, whose interrupt() returns the decision.
Resumes are claimed atomically: a second resume of the same interrupt gets AlreadyResumed,
with durable_nb.langgraph.resume() as with LangGraph's own Command(resume=…). Two real
processes released together by a barrier file resume the same interrupt, ten times over:
with resume() exactly one side effect happens every time and the loser gets AlreadyResumed;
with Command(resume=…) exactly one resume is stored and the loser gets AlreadyResumed.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, TypedDict

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("ipywidgets")

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

import durable_nb as dnb
from durable_nb.errors import AlreadyResumed
from durable_nb.langgraph import DurableSaver, resume
from durable_nb.store import disconnect
from durable_nb.widgets import graph_gate_panel

ROUNDS = 10


class State(TypedDict, total=False):
    amount: int
    decision: Any


def build(url: str, effects: list[Any]) -> tuple[Any, DurableSaver]:
    def pay(state: State) -> State:
        decision = interrupt({"question": "Pay the invoice?", "amount": state["amount"]})
        effects.append(decision)  # the side effect a decision allows
        return {"decision": decision}

    builder = StateGraph(State)
    builder.add_node("pay", pay)
    builder.add_edge(START, "pay")
    builder.add_edge("pay", END)
    saver = DurableSaver.from_url(url)
    return builder.compile(checkpointer=saver), saver


def config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


@pytest.fixture
def graph(store_url: str) -> Any:
    effects: list[Any] = []
    compiled, saver = build(store_url, effects)
    yield compiled, saver, effects
    disconnect(store_url)


def test_the_gate_panel_approve_resumes_the_graph_with_the_decision(graph: Any) -> None:
    compiled, saver, effects = graph
    compiled.invoke({"amount": 120}, config("inv-1"))
    panel = graph_gate_panel(compiled, config("inv-1"))
    assert "Pay the invoice?" in panel.title.value and "120" in panel.context.value
    panel.comment.value = "checked"
    panel.approve_button.click()
    assert "Approved" in panel.status.value and "finished" in panel.status.value, panel.status.value
    [decision] = effects
    assert (decision["approved"], decision["comment"], decision["value"]) == (True, "checked", None)
    assert decision["by"] and decision["at"]
    assert panel.link.result["decision"] == decision
    assert compiled.get_state(config("inv-1")).values["decision"] == decision
    assert dnb.get_run(saver.run_id("inv-1"), store=saver.store).status == "completed"
    steps = list(dnb.history(config("inv-1"), store=saver.store).step)
    assert steps == ["after:input", "after:start", "approved:pay", "after:pay"]
    # The panel is done: a second click decides nothing and runs nothing.
    panel.approve_button.click()
    assert len(effects) == 1


def test_reject_carries_the_rejection_and_an_empty_thread_has_nothing_to_decide(graph: Any) -> None:
    compiled, _saver, effects = graph
    compiled.invoke({"amount": 5}, config("inv-2"))
    panel = graph_gate_panel(compiled, config("inv-2"))
    panel.reject_button.click()
    assert effects[0]["approved"] is False
    note = graph_gate_panel(compiled, config("inv-2"))
    assert "waits at no interrupt" in note.value


def test_a_second_resume_gets_already_resumed_and_runs_nothing(graph: Any, store_url: str) -> None:
    compiled, _saver, effects = graph
    compiled.invoke({"amount": 1}, config("inv-3"))
    out = resume(compiled, config("inv-3"), value={"ref": "A-1"}, comment="ok", by="ann")
    assert out["decision"]["value"] == {"ref": "A-1"} and out["decision"]["by"] == "ann"
    other, _ = build(store_url, effects)  # another saver, as another process has
    with pytest.raises(AlreadyResumed):
        resume(other, config("inv-3"), approved=False)
    with pytest.raises(AlreadyResumed):
        other.invoke(Command(resume="again"), config("inv-3"))
    assert len(effects) == 1


def test_command_resume_claims_the_interrupt_once(graph: Any, store_url: str) -> None:
    compiled, saver, effects = graph
    compiled.invoke({"amount": 2}, config("inv-4"))
    assert compiled.invoke(Command(resume="yes"), config("inv-4"))["decision"] == "yes"
    other, _ = build(store_url, effects)
    with pytest.raises(AlreadyResumed, match="already resumed"):
        other.invoke(Command(resume="no"), config("inv-4"))
    assert compiled.get_state(config("inv-4")).values["decision"] == "yes"
    events = dnb.events(config("inv-4"), store=saver.store)
    assert list(events.type) == ["gate_opened", "run_paused", "gate_decided"]


# -- the race: two processes released together by a barrier file ----------------------------

RACER = r"""
import os, sys, time
from typing import Any, TypedDict
from langgraph.config import get_config
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from durable_nb.errors import AlreadyResumed
from durable_nb.langgraph import DurableSaver, resume

url, folder, mode, rounds, me = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]

class State(TypedDict, total=False):
    amount: int
    decision: Any

def pay(state):
    decision = interrupt({"question": "Pay the invoice?"})
    thread = get_config()["configurable"]["thread_id"]
    with open(os.path.join(folder, f"effects-{thread}"), "a") as f:  # the side effect
        f.write(me + "\n")
    return {"decision": decision}

builder = StateGraph(State)
builder.add_node("pay", pay)
builder.add_edge(START, "pay")
builder.add_edge("pay", END)
graph = builder.compile(checkpointer=DurableSaver.from_url(url))
open(os.path.join(folder, f"ready-{me}"), "w").close()
for r in range(rounds):
    barrier = os.path.join(folder, f"go-{r}")
    while not os.path.exists(barrier):
        time.sleep(0.001)
    config = {"configurable": {"thread_id": f"race-{r}"}}
    try:
        if mode == "resume":
            resume(graph, config, comment=me)
        else:
            graph.invoke(Command(resume=me), config)
        outcome = "won"
    except AlreadyResumed:
        outcome = "AlreadyResumed"
    except Exception as error:
        outcome = f"{type(error).__name__}: {error}"
    with open(os.path.join(folder, f"out-{r}-{me}"), "w") as f:
        f.write(outcome)
"""


def _race(store_url: str, tmp_path: Path, mode: str) -> list[tuple[list[str], list[str]]]:
    """Run ROUNDS races; return, per round, the two outcomes and the side effects' writers."""
    script = tmp_path / "racer.py"
    script.write_text(RACER)
    compiled, _saver = build(store_url, [])
    for r in range(ROUNDS):
        compiled.invoke({"amount": r}, config(f"race-{r}"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), store_url, str(tmp_path), mode, str(ROUNDS), who],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for who in ("one", "two")
    ]
    results = []
    try:
        while not all((tmp_path / f"ready-{who}").exists() for who in ("one", "two")):
            for proc in procs:
                if proc.poll() is not None:
                    pytest.fail(f"a racer exited early: {proc.stdout.read() if proc.stdout else ''}")
        for r in range(ROUNDS):
            (tmp_path / f"go-{r}").touch()
        for proc in procs:
            output = proc.communicate(timeout=300)[0]
            assert proc.returncode == 0, output
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for r in range(ROUNDS):
        outcomes = sorted((tmp_path / f"out-{r}-{who}").read_text() for who in ("one", "two"))
        effects_file = tmp_path / f"effects-race-{r}"
        effects = effects_file.read_text().split() if effects_file.exists() else []
        results.append((outcomes, effects))
    return results


def test_two_processes_resume_the_same_interrupt_exactly_one_wins(store_url: str, tmp_path: Path) -> None:
    results = _race(store_url, tmp_path, "resume")
    for outcomes, effects in results:
        assert outcomes == ["AlreadyResumed", "won"], results
        assert len(effects) == 1, results
    compiled, _saver = build(store_url, [])
    for r, (_, effects) in enumerate(results):
        state = compiled.get_state(config(f"race-{r}")).values
        assert state["decision"]["comment"] == effects[0]  # the winner's decision, and only it
    print(f"resume(): {ROUNDS} races, {sum(len(e) for _, e in results)} side effects")


def test_two_processes_racing_command_resume_store_one_resume(store_url: str, tmp_path: Path) -> None:
    # LangGraph stores a Command's resume write in the background while the task already runs:
    # the loser's task body may run before its claim fails, but its run stops there, typed, and
    # only the winner's resume is stored and goes on.
    results = _race(store_url, tmp_path, "command")
    compiled, saver = build(store_url, [])
    for r, (outcomes, effects) in enumerate(results):
        assert outcomes == ["AlreadyResumed", "won"], results
        assert 1 <= len(effects) <= 2, results
        state = compiled.get_state(config(f"race-{r}"))
        assert state.next == () and state.values["decision"] in effects
        steps = list(dnb.history(config(f"race-{r}"), store=saver.store).step)
        assert steps == ["after:input", "after:start", "after:pay"], steps
    print(f"Command(resume=…): {ROUNDS} races, {sum(len(e) for _, e in results)} side effects")


def test_aresume_decides_and_resumes_an_async_graph(store_url: str) -> None:
    from durable_nb.langgraph import aresume

    async def pay(state: State) -> State:
        return {"decision": interrupt({"question": "Pay?"})}

    builder = StateGraph(State)
    builder.add_node("pay", pay)
    builder.add_edge(START, "pay")
    builder.add_edge("pay", END)
    compiled = builder.compile(checkpointer=DurableSaver.from_url(store_url))

    async def main() -> Any:
        await compiled.ainvoke({"amount": 3}, config("inv-5"))
        out = await aresume(compiled, config("inv-5"), approved=False, comment="too much")
        with pytest.raises(AlreadyResumed):
            await aresume(compiled, config("inv-5"))
        with pytest.raises(AlreadyResumed):
            await compiled.ainvoke(Command(resume="late"), config("inv-5"))
        return out

    out = asyncio.run(main())
    assert (out["decision"]["approved"], out["decision"]["comment"]) == (False, "too much")
    disconnect(store_url)
