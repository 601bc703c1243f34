"""A value forged in the store is refused, whatever its form (issue 27 item 7), on SQLite and PostgreSQL.

Someone who can write to the database but does not hold the secret key adds a value of their
own and points a checkpoint at it. A pickle so made was always refused; plain data stored as
JSON was addressed by its SHA-256 alone, which anyone can compute, so LangGraph received a
forged ``HumanMessage``, a workflow a forged amount and a notebook replayed forged outputs.
Every stored value is now signed: a forged one raises TamperedValueError and is never handed on.
"""

from __future__ import annotations

import json
from typing import Any, TypedDict

import pytest
from conftest import execute_sql
from forgekit import compact, forge_blob, forge_json, point_head_at

import durable_nb as dnb
from durable_nb.errors import TamperedValueError

# What LangGraph's serializer turns into HumanMessage(content="FORGED") when it loads ("json", text).
FORGED_MESSAGE = json.dumps(
    {
        "lc": 1,
        "type": "constructor",
        "id": ["langchain", "schema", "messages", "HumanMessage"],
        "kwargs": {"content": "FORGED"},
    }
)


# -- the LangGraph saver ----------------------------------------------------------------------------

langgraph = pytest.importorskip("langgraph")

from langgraph.graph import END, START, StateGraph  # noqa: E402

from durable_nb.langgraph import DurableSaver  # noqa: E402


class Notes(TypedDict, total=False):
    note: Any


def notes_graph(saver: DurableSaver) -> Any:
    builder = StateGraph(Notes)
    builder.add_node("write", lambda state: {"note": "written by the graph"})
    builder.add_edge(START, "write")
    builder.add_edge("write", END)
    return builder.compile(checkpointer=saver)


@pytest.mark.parametrize("prefix", ["j-", "js-"], ids=["unsigned-json-address", "signed-prefix-sha256"])
def test_a_forged_channel_value_is_refused_by_the_saver(store_url: str, prefix: str) -> None:
    """A JSON value inserted with SQL and named by a checkpoint's channel raises TamperedValueError;
    LangGraph never receives it (neither from get_tuple nor from the graph's state)."""
    saver = DurableSaver.from_url(store_url)
    config = {"configurable": {"thread_id": "forged-channel"}}
    notes_graph(saver).invoke({}, config)
    forged = forge_json(store_url, ["json", FORGED_MESSAGE], prefix)
    point_head_at(store_url, saver.run_id("forged-channel"), "note", forged)

    fresh = DurableSaver.from_url(store_url)  # as another process would read the thread
    with pytest.raises(TamperedValueError):
        fresh.get_tuple(config)
    with pytest.raises(TamperedValueError):
        notes_graph(fresh).get_state(config)
    with pytest.raises(TamperedValueError):
        list(fresh.list(config))


def test_a_forged_pending_write_is_refused_by_the_saver(store_url: str) -> None:
    """A pending write added with SQL (a row naming a forged JSON value), or a stored one edited to
    name another task's channel, raises TamperedValueError; LangGraph never receives it as a write."""
    saver = DurableSaver.from_url(store_url)
    config = {"configurable": {"thread_id": "forged-write"}}
    notes_graph(saver).invoke({}, config)
    stored = saver.get_tuple(config)
    assert stored is not None
    value = forge_json(store_url, ["json", FORGED_MESSAGE])
    run_id = saver.run_id("forged-write")
    execute_sql(
        store_url,
        "INSERT INTO pending_writes (run_id, checkpoint_id, task_id, idx, channel, task_path, value_hash, stamp, "
        "mac, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (run_id, stored.checkpoint["id"], "forger-task", 0, "note", "", value, 0, "0" * 64, 0.0),
    )
    with pytest.raises(TamperedValueError):
        DurableSaver.from_url(store_url).get_tuple(config)


def test_an_edited_pending_write_is_refused_by_the_saver(store_url: str) -> None:
    """A stored pending write whose channel is changed with SQL no longer matches its signature."""
    saver = DurableSaver.from_url(store_url)
    config = {"configurable": {"thread_id": "edited-write"}}
    graph = notes_graph(saver)
    graph.invoke({}, config)
    first = list(saver.list(config))[-1]
    assert first.pending_writes  # the input's task wrote
    execute_sql(store_url, "UPDATE pending_writes SET channel = 'note'")
    with pytest.raises(TamperedValueError):
        list(DurableSaver.from_url(store_url).list(config))


# -- workflows ---------------------------------------------------------------------------------------


def payment_flow(url: str, paid: list[Any]) -> dnb.Workflow:
    flow = dnb.Workflow("payment", store=url)

    @flow.node()
    def decide(state: dict[str, Any]) -> dict[str, Any]:
        return {"amount": 10, "payee": "alice"}

    @flow.node(after="decide")
    def review(state: dict[str, Any]) -> dict[str, Any]:
        return {"approved": dnb.gate("pay", context={"amount": state["amount"]}).approved}

    @flow.node(after="review")
    def pay(state: dict[str, Any]) -> dict[str, Any]:
        paid.append(state["amount"])
        return {"paid": True}

    return flow


def test_a_forged_workflow_value_is_refused(store_url: str) -> None:
    """A workflow's JSON state value forged with SQL while the run waits at a gate raises
    TamperedValueError when the state is read or the run goes on; the next node never runs with it."""
    paid: list[Any] = []
    flow = payment_flow(store_url, paid)
    run = flow.run({})
    assert run.status == "paused"
    point_head_at(store_url, run.id, "amount", forge_json(store_url, 1_000_000))

    with pytest.raises(TamperedValueError):
        _ = dnb.get_run(run.id, store=store_url).state
    with pytest.raises(TamperedValueError):
        flow.approve(run.id)
    assert paid == []


@pytest.mark.parametrize("prefix", ["l-", "ls-"], ids=["unsigned-list-address", "signed-prefix-sha256"])
def test_a_forged_list_of_stored_values_is_refused(store_url: str, prefix: str) -> None:
    """A list stored in chunks, rebuilt with SQL from values the store holds (its chunks swapped),
    raises TamperedValueError: a list's address is signed like any value's."""
    flow = dnb.Workflow("ledger", store=store_url)

    @flow.node()
    def first(state: dict[str, Any]) -> dict[str, Any]:
        return {"entries": [f"entry {i}" for i in range(20)]}

    @flow.node(after="first")
    def second(state: dict[str, Any]) -> dict[str, Any]:
        return {"entries": [*state["entries"], "refund 5"]}

    run = flow.run({})
    ((address,),) = execute_sql(
        store_url, "SELECT hash FROM blobs WHERE codec = 'list' ORDER BY created_at DESC LIMIT 1"
    )
    ((data,),) = execute_sql(store_url, "SELECT data FROM blobs WHERE hash = ?", (address,))
    chunks = json.loads(bytes(data))
    assert len(chunks) == 2
    forged = forge_blob(store_url, compact(chunks[::-1]), prefix, "list", [c[0] for c in chunks])
    point_head_at(store_url, run.id, "entries", forged)

    with pytest.raises(TamperedValueError):
        _ = dnb.get_run(run.id, store=store_url).state


# -- notebooks ---------------------------------------------------------------------------------------


def test_forged_cell_outputs_are_refused_not_shown(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A committed cell's outputs (stored as JSON) replaced with SQL: restoring the cell in a new
    shell fails with TamperedValueError, and the forged output is never shown."""
    from IPython.core.interactiveshell import InteractiveShell

    from durable_nb._loop import run_sync
    from durable_nb.notebook.session import session_for

    cell = "%%durable report\nprint('the real total')\ntotal = 5"
    first = InteractiveShell()
    first.run_line_magic("load_ext", "durable_nb")
    first.run_cell(f"%durable run forged-outputs --store {store_url}")
    assert first.run_cell(cell).success
    cell_run = session_for(first).cell_run
    run_id = cell_run.run_id
    run_sync(cell_run.release())
    ((seq, extra),) = execute_sql(
        store_url, "SELECT seq, extra FROM checkpoints WHERE run_id = ? AND step = 'after:report'", (run_id,)
    )
    extra = json.loads(extra)
    ((outputs,),) = execute_sql(store_url, "SELECT data FROM blobs WHERE hash = ?", (extra["outputs"],))
    forged = forge_json(store_url, json.loads(bytes(outputs).replace(b"the real total", b"FORGED total")))
    extra["blobs"] = [forged if b == extra["outputs"] else b for b in extra["blobs"]]
    extra["outputs"] = forged
    execute_sql(
        store_url, "UPDATE checkpoints SET extra = ? WHERE run_id = ? AND seq = ?", (json.dumps(extra), run_id, seq)
    )
    capsys.readouterr()

    restorer = InteractiveShell()
    restorer.run_line_magic("load_ext", "durable_nb")
    restorer.run_cell(f"%durable run forged-outputs --store {store_url}")
    result = restorer.run_cell(cell)
    assert isinstance(result.error_in_exec, TamperedValueError)
    assert "FORGED" not in capsys.readouterr().out
