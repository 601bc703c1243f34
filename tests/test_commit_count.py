"""One durable commit per node on the hot path: counted transactions, not time."""

from __future__ import annotations

import sqlite3

import pytest
from conftest import stated

import durable_nb as dnb
from durable_nb._loop import run_sync
from durable_nb.store.sqlite import SQLiteStore

pytestmark = pytest.mark.sqlite_only


def count_commits(store: dnb.Store) -> list[str]:
    """Record every COMMIT the store's connection executes."""
    assert isinstance(store, SQLiteStore)
    seen: list[str] = []

    def install(conn: sqlite3.Connection) -> None:
        conn.set_trace_callback(lambda sql: seen.append(sql) if sql.strip().upper() == "COMMIT" else None)

    run_sync(store._run(install))
    return seen


def chain(store: dnb.Store, length: int, name: str = "chain") -> dnb.Workflow:
    flow = dnb.Workflow(name, store=store)
    previous = None
    for index in range(length):

        def step(state, index=index):
            return {"last": index, f"v{index}": index * 2}

        step.__name__ = f"n{index:02d}"
        flow.node(step, after=previous)
        previous = step.__name__
    return flow


def test_one_commit_per_node(store_url: str) -> None:
    """A 20-node chain costs 21 commits: the run's creation and one per node (run_end rides with the last)."""
    store = dnb.connect(store_url)
    flow = chain(store, 20)
    flow.run({"warm": True})
    commits = count_commits(store)
    run = flow.run({})
    assert run.status == "completed"
    assert len(commits) == 21
    events = run_sync(store.list_events(run.id))
    # Start markers rode along: every node has a start and a finish without extra commits.
    assert [e.type for e in events].count("node_started") == 20
    assert [e.type for e in events].count("node_finished") == 20


def test_waves_commit_each_node_once(store_url: str) -> None:
    """A wave of 5 nodes commits 5 times: each node is committed on its own."""
    store = dnb.connect(store_url)
    flow = dnb.Workflow("wave", store=store)
    for index in range(5):

        def step(state, index=index):
            return {f"w{index}": index}

        step.__name__ = f"w{index}"
        flow.node(step)
    flow.run({})
    commits = count_commits(store)
    flow.run({})
    assert len(commits) == 6


def test_unchanged_values_are_not_written_again(store_url: str) -> None:
    """Committing a node writes only the values it changed."""
    store = dnb.connect(store_url)
    flow = chain(store, 10)
    run = flow.run({"big": "x" * 100_000})
    checkpoints = stated(store, run.id)
    for checkpoint in checkpoints[:-1]:
        assert "big" not in (checkpoint.node_output or {}) and "big" not in checkpoint.changes
        assert checkpoint.manifest["big"] == checkpoints[0].manifest["big"]
    with sqlite3.connect(store_url[len("sqlite:///") :]) as conn:
        assert conn.execute("SELECT COUNT(*) FROM blobs WHERE size >= 100000").fetchone()[0] == 1
