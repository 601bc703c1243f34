"""The sync API drives a run on one engine thread: counted thread hand-offs and commits, not time."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
from test_commit_count import chain, count_commits

import durable_nb as dnb
from durable_nb.engine.execution import attempts

pytestmark = pytest.mark.sqlite_only


@pytest.fixture
def hand_offs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Name every call handed to a node thread (the run's engine, or a node of its own)."""
    handed: list[str] = []
    submit = attempts._NodeThreads.submit

    def counted(self, fn, *args):
        handed.append(getattr(args[0], "__name__", repr(args[0])))
        return submit(self, fn, *args)

    monkeypatch.setattr(attempts._NodeThreads, "submit", counted)
    yield handed


def test_a_chain_hands_off_once_per_run_and_commits_once_per_node(store_url: str, hand_offs: list[str]) -> None:
    """A 20-node chain of sync nodes: one hand-off (to the engine) for the run, one commit per node."""
    store = dnb.connect(store_url)
    flow = chain(store, 20)
    flow.run({"warm": True})
    commits = count_commits(store)
    hand_offs.clear()
    run = flow.run({})
    assert run.status == "completed"
    assert hand_offs == ["run_on_engine_loop"]
    assert len(commits) == 21  # the run's creation, then one per node (run_end rides with the last)


def test_a_node_with_a_timeout_runs_on_a_thread_of_its_own(store_url: str, hand_offs: list[str]) -> None:
    """A timed node can be abandoned mid-run, so the engine hands it to a node thread; the others run inline."""
    flow = dnb.Workflow("timed", store=store_url)
    threads: dict[str, str] = {}

    @flow.node()
    def first(state):
        threads["first"] = threading.current_thread().name
        return {"a": 1}

    @flow.node(after="first", timeout_seconds=30)
    def timed(state):
        return {"b": 2}

    @flow.node(after="timed")
    def last(state):
        threads["last"] = threading.current_thread().name
        return {"c": 3}

    run = flow.run({})
    assert run.status == "completed"
    assert hand_offs == ["run_on_engine_loop", "timed"]  # the engine, then the timed node
    engine = threads["first"]
    assert threads["last"] == engine != threading.current_thread().name


def test_an_inline_node_runs_as_on_a_thread_of_its_own(store_url: str) -> None:
    """No loop runs for an inline node: asyncio.run and the sync API (another workflow) work in it."""
    flow = dnb.Workflow("outer", store=store_url)
    inner = dnb.Workflow("inner", store=store_url)

    @inner.node()
    def deep(state):
        return {"deep": state["x"] + 1}

    @flow.node()
    def uses_asyncio(state):
        async def answer() -> int:
            return 41

        return {"x": asyncio.run(answer())}

    @flow.node(after="uses_asyncio")
    def nests(state):
        return {"y": inner.run({"x": state["x"]}).state["deep"]}

    run = flow.run({})
    assert run.status == "completed"
    assert (run.state["x"], run.state["y"]) == (41, 42)
