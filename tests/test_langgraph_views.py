"""durable_nb's views on LangGraph threads (issue 19 item 3), on SQLite and PostgreSQL.

A real StateGraph runs with DurableSaver and stops at interrupt(); its thread is one run:
runs() lists it, history() has a row per LangGraph checkpoint named after the nodes that ran
(the checkpoint it waits at reads interrupted, steps have durations), the views take the
graph's config as well as the run id, compare() shows channel values as objects, a LangGraph
fork (update_state) is a branch inside the run's history, and the inspector builds on it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypedDict

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("ipywidgets")

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

import durable_nb as dnb
from durable_nb.errors import RunNotFound
from durable_nb.langgraph import DurableSaver
from durable_nb.store import disconnect


class State(TypedDict, total=False):
    count: int
    items: list[str]
    answer: Any


def prepare(state: State) -> State:
    return {"count": state.get("count", 0) + 1, "items": ["a", "b"]}


def review(state: State) -> State:
    return {"answer": interrupt({"question": "Ship it?", "count": state["count"]})}


def build(url: str) -> tuple[Any, DurableSaver]:
    builder = StateGraph(State)
    builder.add_node("prepare", prepare)
    builder.add_node("review", review)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "review")
    builder.add_edge("review", END)
    saver = DurableSaver.from_url(url)
    return builder.compile(checkpointer=saver), saver


CONFIG = {"configurable": {"thread_id": "ticket-7"}}


@pytest.fixture
def paused(store_url: str) -> Any:
    graph, saver = build(store_url)
    graph.invoke({"count": 0}, CONFIG)
    yield graph, saver
    disconnect(store_url)


def test_a_thread_is_a_run_in_runs_and_its_id_is_found_from_the_thread(paused: Any) -> None:
    _graph, saver = paused
    run_id = saver.run_id("ticket-7")
    frame = dnb.runs(store=saver.store)
    row = frame[frame.run_id == run_id].iloc[0]
    assert (row["name"], row["kind"], row["status"]) == ("ticket-7", "workflow", "paused")
    assert row["checkpoints"] == len(list(saver.list(CONFIG)))
    with pytest.raises(RunNotFound, match="ticket-8"):
        saver.run_id("ticket-8")


def test_history_has_a_row_per_checkpoint_named_after_its_nodes(paused: Any) -> None:
    _graph, saver = paused
    by_id = dnb.history(saver.run_id("ticket-7"), store=saver.store)
    by_config = dnb.history(CONFIG, store=saver.store)
    assert by_id.equals(by_config)
    checkpoints = list(saver.list(CONFIG))[::-1]
    assert len(by_id) == len(checkpoints)
    assert list(by_id.step) == ["after:input", "after:start", "after:prepare"]
    assert list(by_id.node_id) == ["input", "start", "prepare"]
    # The checkpoint the review task stopped at waits for a decision.
    assert list(by_id.status) == ["ok", "ok", "interrupted"]
    assert by_id.duration.isna().tolist() == [True, False, False]
    assert sorted(by_id.changed.iloc[2]) == ["branch:to:review", "count", "items"]
    ids = [cp.config["configurable"]["checkpoint_id"] for cp in checkpoints]
    assert [c.split("@")[0] for c in by_id.checkpoint_id] == ids


def test_resumed_thread_reads_completed_with_the_resumed_step(paused: Any) -> None:
    graph, saver = paused
    graph.invoke(Command(resume="yes"), CONFIG)
    frame = dnb.history(CONFIG, store=saver.store)
    assert list(frame.step) == ["after:input", "after:start", "after:prepare", "after:review"]
    assert list(frame.status) == ["ok"] * 4
    assert dnb.get_run(saver.run_id("ticket-7"), store=saver.store).status == "completed"
    events = dnb.events(CONFIG, store=saver.store)
    assert list(events.type) == ["gate_opened", "run_paused", "gate_decided"]


def test_compare_shows_channel_values_as_objects(paused: Any) -> None:
    _graph, saver = paused
    frame = dnb.compare(CONFIG, ["count", "items"], store=saver.store)
    assert frame["count"].iloc[0] == 1
    assert frame["items"].iloc[0] == ["a", "b"]


def test_a_langgraph_fork_is_a_branch_in_the_threads_history(paused: Any) -> None:
    graph, saver = paused
    first = list(saver.list(CONFIG))[-2]  # the checkpoint after START, before prepare ran
    forked = graph.update_state(first.config, {"count": 41}, as_node="prepare")
    frame = dnb.history(CONFIG, store=saver.store)
    row = frame.iloc[-1]
    assert (row.step, row.node_id) == ("update:prepare", "prepare")
    assert row.parent_checkpoint_id.split("@")[0] == first.config["configurable"]["checkpoint_id"]
    assert row.checkpoint_id.split("@")[0] == forked["configurable"]["checkpoint_id"]
    # LangGraph's forks stay inside the thread's run: forks() shows the one run.
    tree = dnb.forks(CONFIG, store=saver.store)
    assert list(tree.run_id) == [saver.run_id("ticket-7")]


def test_the_inspector_builds_on_a_thread(paused: Any) -> None:
    from durable_nb.widgets.inspector import Inspector

    _graph, saver = paused
    inspector = Inspector(saver.run_id("ticket-7"), store=saver.store)
    try:
        labels = [label for label, _ in inspector.checkpoints.options]
        assert [label.split()[1] for label in labels] == ["after:input", "after:start", "after:prepare"]
        assert "waiting for a decision" in labels[-1]  # the gate's checkpoint, as the history view names it
        assert "Ship it?" in inspector.summary.value
        assert not inspector.approve_button.disabled
    finally:
        inspector.close()


def test_the_views_find_a_thread_in_its_savers_store(paused: Any, tmp_path: Path) -> None:
    """Issue 27 item 23: a config given without store= is read from the store of the saver that wrote
    its thread (not the default store, which is left untouched); an unknown thread's RunNotFound
    names the stores looked in."""
    from durable_nb.widgets.inspector import Inspector

    _graph, saver = paused
    assert dnb.history(CONFIG).equals(dnb.history(CONFIG, store=saver.store))
    assert dnb.events(CONFIG).equals(dnb.events(CONFIG, store=saver.store))
    assert list(dnb.forks(CONFIG).run_id) == [saver.run_id("ticket-7")]
    assert dnb.compare(CONFIG, ["count"])["count"].iloc[0] == 1
    inspector = dnb.inspect(CONFIG)
    try:
        assert isinstance(inspector, Inspector) and inspector.run_id == saver.run_id("ticket-7")
    finally:
        inspector.close()
    assert not (tmp_path / ".durable_nb").exists()
    with pytest.raises(RunNotFound, match="ticket-8") as missing:
        dnb.history({"configurable": {"thread_id": "ticket-8"}})
    assert saver.store.url in str(missing.value) and ".durable_nb/runs.db" in str(missing.value)


def _readme_langgraph_section() -> str:
    """The LangGraph how-to (the README's short example runs in tests/test_readme.py)."""
    return (Path(__file__).resolve().parent.parent / "docs" / "how-to" / "langgraph.md").read_text()


def test_the_readme_langgraph_snippets_run_as_written(tmp_path: Path) -> None:
    """The LangGraph how-to's example runs as written (in a fresh folder), and so does every call the
    paragraph after it shows, reading the thread the example made."""
    section = _readme_langgraph_section()
    (example,) = re.findall(r"```python\n(.*?)```", section, re.S)
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    try:
        # As a reader runs it: without this file's ``from __future__ import annotations``.
        exec(compile(example, "docs/how-to/langgraph.md", "exec", dont_inherit=True), namespace)
        paragraph = section[section.index("A thread is a run.") :].split("\n\n")[0]
        calls = re.findall(r"`((?:durable_nb|saver)\.[^`]*\))`", paragraph)
        assert len(calls) >= 7, calls
        results = {call: eval(call, namespace) for call in calls}
        results["durable_nb.inspect(config)"].close()
        assert namespace["graph"].get_state(namespace["config"]).values["answer"]["approved"] is True
    finally:
        disconnect("sqlite:///runs.db")
    history = results["durable_nb.history(config)"]
    assert list(history.step)[-1] == "after:ask" and len(history) >= 3
    assert history.equals(results['durable_nb.history(saver.run_id("ticket-8841"), store=saver.store)'])
    assert list(results['durable_nb.runs(store="sqlite:///runs.db")'].name) == ["ticket-8841"]
    assert (tmp_path / "runs.db").exists() and not (tmp_path / ".durable_nb").exists()
