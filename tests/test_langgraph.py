"""DurableSaver under a real LangGraph graph (issue 19 item 1), on SQLite and PostgreSQL.

A StateGraph of a few nodes, one of which loads a 1 MB value that never changes, runs with
DurableSaver, stops at an interrupt() and is resumed by another saver (as another process
would); the store holds the 1 MB value once however many checkpoints carry it, a blob changed
in the store is refused with TamperedValueError, and bad input gets typed errors that say
what to do.
"""

from __future__ import annotations

import ast
import asyncio
import itertools
import os
import threading
from pathlib import Path
from typing import Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from conftest import execute_sql
from langgraph.checkpoint.base import empty_checkpoint, writes_sort_key
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

import durable_nb as dnb
from durable_nb.errors import InvalidInput, SerializationError, TamperedValueError
from durable_nb.langgraph import DurableSaver
from durable_nb.store import codec, disconnect

MB = 1 << 20
# Random bytes do not compress: the store's byte count is the value's own.
BIG = os.urandom(MB)
STEPS = 5


class State(TypedDict, total=False):
    big: bytes
    count: int
    answer: str


def build(saver: DurableSaver, ran: list[str]) -> Any:
    """A chain load -> step_1..step_5 -> ask (interrupt) -> finish, counting each node's runs."""

    def load(state: State) -> State:
        ran.append("load")
        return {"big": BIG, "count": 0}

    def step(name: str) -> Any:
        def body(state: State) -> State:
            ran.append(name)
            return {"count": state["count"] + 1}

        return body

    def ask(state: State) -> State:
        ran.append("ask")
        answer = interrupt({"question": "ship it?", "count": state["count"]})
        return {"answer": answer}

    def finish(state: State) -> State:
        ran.append("finish")
        return {"count": state["count"] + 100}

    builder = StateGraph(State)
    builder.add_node("load", load)
    names = [f"step_{i}" for i in range(1, STEPS + 1)]
    for name in names:
        builder.add_node(name, step(name))
    builder.add_node("ask", ask)
    builder.add_node("finish", finish)
    chain = ["load", *names, "ask", "finish"]
    builder.add_edge(START, chain[0])
    for a, b in itertools.pairwise(chain):
        builder.add_edge(a, b)
    builder.add_edge(chain[-1], END)
    return builder.compile(checkpointer=saver)


def big_blobs(url: str) -> list[tuple[Any, ...]]:
    """The store's blobs of 1 MB or more: (count, bytes)."""
    return execute_sql(url, "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM blobs WHERE size >= ?", (MB,))


def all_blob_bytes(url: str) -> int:
    return int(execute_sql(url, "SELECT COALESCE(SUM(size), 0) FROM blobs")[0][0])


def test_graph_runs_pauses_and_resumes_with_the_big_value_stored_once(store_url: str) -> None:
    """Issue 19 item 1: a real graph pauses at interrupt() and another saver resumes it; the
    1 MB value carried by every checkpoint is serialized and stored once; the thread is a run
    whose history lists its checkpoints."""
    ran: list[str] = []
    config = {"configurable": {"thread_id": "ticket-8841"}}
    first = build(DurableSaver.from_url(store_url), ran)
    result = first.invoke({"count": 0}, config)
    assert "__interrupt__" in result
    assert ran == ["load", *[f"step_{i}" for i in range(1, STEPS + 1)], "ask"]
    paused = dnb.runs("ticket-8841", store=store_url)
    assert list(paused["status"]) == ["paused"]

    # Another process: a store object and a saver of its own, nothing remembered.
    disconnect(store_url)
    second = build(DurableSaver.from_url(store_url), ran)
    done = second.invoke(Command(resume="yes"), config)
    assert done["answer"] == "yes" and done["count"] == STEPS + 100 and done["big"] == BIG
    # LangGraph runs the interrupted node again from its top; nothing before it runs again.
    assert ran == ["load", *[f"step_{i}" for i in range(1, STEPS + 1)], "ask", "ask", "finish"]

    history = list(second.checkpointer.list(config))
    carrying = [t for t in history if t.checkpoint["channel_values"].get("big") == BIG]
    assert len(carrying) >= STEPS + 3
    count, size = big_blobs(store_url)[0]
    assert (count, 0 < size - MB < 1024) == (1, True), "the unchanged 1 MB value is stored once"
    assert all_blob_bytes(store_url) < MB + 64 * 1024

    runs = dnb.runs("ticket-8841", store=store_url)
    assert list(runs["status"]) == ["completed"]
    frame = dnb.history(runs.iloc[0]["run_id"], store=store_url)
    assert len(frame) == len(history)
    assert list(frame["checkpoint_id"].str.split("@").str[0]) == [t.checkpoint["id"] for t in reversed(history)]
    # What each checkpoint wrote: only the first to carry the big value paid for it.
    assert sorted(frame["bytes_written"])[-1] > MB and sorted(frame["bytes_written"])[-2] < 64 * 1024


def test_async_graph_resumes_too(store_url: str) -> None:
    """Issue 19 item 1: the async methods drive a graph the same way (ainvoke, resume, state)."""
    ran: list[str] = []
    config = {"configurable": {"thread_id": "async-thread"}}

    async def go() -> Any:
        graph = build(DurableSaver.from_url(store_url), ran)
        await graph.ainvoke({"count": 0}, config)
        done = await graph.ainvoke(Command(resume="later"), config)
        snapshot = await graph.aget_state(config)
        return done, snapshot

    done, snapshot = asyncio.run(go())
    assert done["answer"] == "later"
    assert snapshot.values["count"] == STEPS + 100 and snapshot.next == ()
    assert big_blobs(store_url)[0][0] == 1


def test_a_tampered_value_is_refused_not_loaded(store_url: str) -> None:
    """Issue 19 item 1 (signed values): a blob changed in the store fails its signature check;
    loading the checkpoint raises TamperedValueError and never deserializes it."""
    saver = DurableSaver.from_url(store_url)
    graph = build(saver, [])
    config = {"configurable": {"thread_id": "tampered"}}
    graph.invoke({"count": 0}, config)
    (stored,) = execute_sql(store_url, "SELECT hash, data FROM blobs WHERE size >= ?", (MB,))
    data = bytearray(stored[1])
    data[len(data) // 2] ^= 0xFF
    execute_sql(store_url, "UPDATE blobs SET data = ? WHERE hash = ?", (bytes(data), stored[0]))
    with pytest.raises(TamperedValueError, match="signature check"):
        DurableSaver.from_url(store_url).get_tuple(config)
    with pytest.raises(TamperedValueError):
        graph.get_state(config)


def test_copy_and_delete_share_values_and_collect_them(store_url: str) -> None:
    """Issue 19 item 1: copy_thread shares values (no bytes copied), delete_thread keeps values
    another thread still uses and collects them once nothing does."""
    saver = DurableSaver.from_url(store_url)
    graph = build(saver, [])
    graph.invoke({"count": 0}, {"configurable": {"thread_id": "source"}})
    saver.copy_thread("source", "copy")
    assert big_blobs(store_url)[0][0] == 1
    copied = saver.get_tuple({"configurable": {"thread_id": "copy"}})
    assert copied is not None and copied.checkpoint["channel_values"]["big"] == BIG
    saver.delete_thread("source")
    assert saver.get_tuple({"configurable": {"thread_id": "source"}}) is None
    assert big_blobs(store_url)[0][0] == 1
    saver.prune(["copy"], strategy="keep_latest")
    assert len(list(saver.list({"configurable": {"thread_id": "copy"}}))) == 1
    assert saver.get_tuple({"configurable": {"thread_id": "copy"}}).checkpoint["channel_values"]["big"] == BIG
    saver.delete_thread("copy")
    assert big_blobs(store_url)[0][0] == 0


def _config(thread_id: str = "t", **more: Any) -> Any:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", **more}}


def test_bad_input_gets_typed_errors_and_writes_nothing(store_url: str) -> None:
    """Issue 19 item 1 (bad input): bad input raises a typed error saying what to do, and writes nothing."""
    saver = DurableSaver.from_url(store_url)
    with pytest.raises(InvalidInput, match="thread_id"):
        saver.get_tuple({})
    with pytest.raises(InvalidInput, match="thread_id"):
        saver.put({"configurable": {}}, empty_checkpoint(), {}, {})
    with pytest.raises(InvalidInput, match="Checkpoint"):
        saver.put(_config(), {"no": "id"}, {}, {})  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="checkpoint_id"):
        saver.put_writes(_config(), [("ch", 1)], "task")
    with pytest.raises(InvalidInput, match="'keep_latest' or 'delete'"):
        saver.prune(["t"], strategy="everything")
    with pytest.raises(InvalidInput, match=r"pass \['run-1'\]"):
        saver.delete_for_runs("run-1")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="limit"):
        list(saver.list(_config(), limit=-1))
    with pytest.raises(InvalidInput, match="store="):
        DurableSaver(42)  # type: ignore[arg-type]
    with pytest.raises(SerializationError, match=r"'when'.*JSON") as raised:
        saver.put(_config(), empty_checkpoint(), {"source": "loop", "step": 1, "when": object()}, {})
    assert raised.value.name == "when"
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"lock": threading.Lock()}
    checkpoint["channel_versions"] = {"lock": 1}
    with pytest.raises(SerializationError, match="'lock'") as raised:
        saver.put(_config(), checkpoint, {"source": "loop", "step": 1}, {"lock": 1})
    assert raised.value.name == "lock"
    assert saver.get_tuple(_config()) is None
    assert list(saver.list(None)) == []


def test_langgraph_is_imported_only_by_durable_nb_langgraph() -> None:
    """Issue 19 (layers): only durable_nb/langgraph imports LangGraph, so `import durable_nb` never does."""
    package = Path(dnb.__file__).parent
    outside = []
    for path in package.rglob("*.py"):
        if (package / "langgraph") in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            outside += [f"{path}: {n}" for n in names if n.split(".")[0] in ("langgraph", "langchain_core")]
    assert outside == []


def test_a_script_exits_quietly(tmp_path: Path) -> None:
    """Issue 19 item 1: a plain script compiling a graph with DurableSaver exits without noise
    (the sync calls from LangGraph's worker threads leave no event loop for the collector)."""
    import subprocess
    import sys

    from conftest import env_with_repo

    script = tmp_path / "graph.py"
    script.write_text(
        "from typing import TypedDict\n"
        "from langgraph.graph import END, START, StateGraph\n"
        "from durable_nb.langgraph import DurableSaver\n"
        "class S(TypedDict):\n    n: int\n"
        "g = StateGraph(S)\n"
        "g.add_node('a', lambda s: {'n': s['n'] + 1})\n"
        "g.add_node('b', lambda s: {'n': s['n'] * 2})\n"
        "g.add_edge(START, 'a'); g.add_edge('a', 'b'); g.add_edge('b', END)\n"
        "graph = g.compile(checkpointer=DurableSaver.from_url('sqlite:///runs.db'))\n"
        "print(graph.invoke({'n': 1}, {'configurable': {'thread_id': 't1'}}))\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env_with_repo(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "{'n': 4}", done.stderr
    assert done.stderr == ""


def test_a_tasks_writes_are_signed_as_each_write_alone_is_checked() -> None:
    """A task's writes are signed together (their shared fields laid out once): each signature is
    the one a single write's check expects, text fields of any length and non-ASCII included."""
    key = b"k" * 32
    writes = [(0, "step", "p-1"), (-3, "__interrupt__", "p-22"), (7, "ünïcode:1", "js-333")]
    for checkpoint_id, task_id, task_path in (("1f0-ck", "task", ""), ("c:1", "t:2", "~__pregel_pull, n1")):
        macs = codec.write_macs(key, checkpoint_id, task_id, task_path, writes)
        assert macs == [codec.write_mac(key, checkpoint_id, task_id, i, c, task_path, v) for i, c, v in writes]
        for (idx, channel, value), mac in zip(writes, macs, strict=True):
            codec.check_write(key, mac, checkpoint_id, task_id, idx, channel, task_path, value)
        with pytest.raises(TamperedValueError):
            codec.check_write(key, macs[0], checkpoint_id, task_id, 0, "step", task_path, "p-2")


def test_a_checkpoints_pending_writes_come_back_in_langgraphs_order(tmp_path: Path) -> None:
    """Writes stored in any order come back sorted as writes_sort_key sorts a super-step's writes
    (task path, then task id, then index), which an order-sensitive reducer replays them in."""
    saver = DurableSaver(f"sqlite:///{tmp_path / 'runs.db'}")
    config = {"configurable": {"thread_id": "order", "checkpoint_ns": ""}}
    stored = saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
    tasks = [("task-b", "~__pregel_pull, b"), ("task-a", "~__pregel_pull, b"), ("task-c", "~__pregel_pull, a")]
    for task_id, task_path in tasks:
        saver.put_writes(stored, [("x", f"{task_id}-0"), ("y", f"{task_id}-1")], task_id, task_path)
    loaded = saver.get_tuple(stored)
    assert loaded is not None
    expected = sorted(
        (writes_sort_key(path, task, idx), (task, channel, f"{task}-{idx}"))
        for task, path in tasks
        for idx, channel in enumerate(("x", "y"))
    )
    assert loaded.pending_writes == [write for _, write in expected]
    assert [task for task, _, _ in loaded.pending_writes[::2]] == ["task-c", "task-a", "task-b"]
