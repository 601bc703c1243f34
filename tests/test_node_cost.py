"""What one workflow node costs the store, counted (never timed), on SQLite and PostgreSQL.

A node of a chain is one transaction. On SQLite: the conditional UPDATE of the run row (its
status column, and so its index, left alone), the checkpoint, its events and at most one
INSERT OR IGNORE of a value, committed in a handful of WAL pages. On PostgreSQL: one statement
in one round trip, the pooled connection's check included (no query of its own when the
connection has nothing to read).
"""

from __future__ import annotations

import asyncio
import sqlite3
import statistics
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import durable_nb as dnb
from durable_nb._loop import run_sync
from durable_nb.engine.runs import watch
from durable_nb.store.postgres import PostgresStore
from durable_nb.store.sqlite import SQLiteStore


def chain(store: Any, nodes: int, name: str = "chain") -> dnb.Workflow:
    """A workflow of ``nodes`` nodes one after the other, each writing its index."""
    flow = dnb.Workflow(name, store=store)
    previous = None
    for index in range(nodes):

        def step(state: dict[str, Any], index: int = index) -> dict[str, Any]:
            return {"step": index}

        step.__name__ = f"n{index}"
        flow.node(step, after=previous, retry_count=0)
        previous = step.__name__
    return flow


def wal_commits(path: Path) -> list[int]:
    """The pages (WAL frames) each transaction in the WAL file at ``path`` wrote, in order."""
    wal = path.read_bytes()
    page_size = struct.unpack(">I", wal[8:12])[0]
    commits, frames, offset = [], 0, 32
    while offset + 24 + page_size <= len(wal):
        _page, size_after_commit = struct.unpack(">II", wal[offset : offset + 8])
        frames += 1
        offset += 24 + page_size
        if size_after_commit:  # the last frame of a transaction
            commits.append(frames)
            frames = 0
    return commits


@pytest.mark.sqlite_only
def test_a_node_is_one_transaction_of_four_inserts_and_an_update_in_seven_pages(tmp_path: Path) -> None:
    store = dnb.connect(f"sqlite:///{tmp_path}/runs.db")
    assert isinstance(store, SQLiteStore)
    flow = chain(store, 20)
    assert flow.run({}).status == "completed"  # the values exist: the next run refers to them
    statements: list[str] = []

    def trace(conn: Any) -> None:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA wal_autocheckpoint=0")  # every page the run writes stays in the WAL
        conn.set_trace_callback(statements.append)

    run_sync(store._run(trace))
    assert flow.run({}).status == "completed"
    run_sync(store._run(lambda conn: conn.set_trace_callback(None)))
    transactions: list[list[str]] = []
    for statement in statements:
        if statement == "BEGIN IMMEDIATE":
            transactions.append([])
        elif statement != "COMMIT":
            transactions[-1].append(statement.split(" (")[0].split(" SET ")[0])
    # The run's creation, then one transaction per node (the last one ends the run as well).
    assert len(transactions) == 21
    middle = transactions[1:-1]
    assert all(
        t
        == [
            "UPDATE runs",
            "INSERT OR IGNORE INTO blobs",
            "INSERT INTO checkpoints",
            "INSERT INTO events",
            "INSERT INTO events",
        ]
        for t in middle
    ), middle
    # The status stays while a node commits: not in the UPDATE's SET list, its index untouched.
    updates = [s for s in statements if s.startswith("UPDATE runs")]
    assert len(updates) == 20 and not [s for s in updates[:-1] if s.startswith("UPDATE runs SET status")]
    pages = wal_commits(Path(f"{tmp_path}/runs.db-wal"))
    assert len(pages) == 21
    # The run row, the checkpoint with its four indexes, the events (keyed by their primary key
    # only): seven pages, and now and then one or two more where a page of a b-tree splits.
    assert statistics.median(pages[1:-1]) <= 7, pages


def wal_frames(store: SQLiteStore, write: Callable[[], object]) -> int:
    """The pages (WAL frames) ``write()`` adds to a SQLite store's WAL, emptied first, with
    checkpoints held off on the store's connection (the WAL only grows: its growth is what was
    written)."""

    def hold_off(conn: sqlite3.Connection) -> int:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA wal_autocheckpoint=0")
        return int(conn.execute("PRAGMA page_size").fetchone()[0]) + 24

    frame = run_sync(store._run(hold_off))
    wal = Path(f"{store.path}-wal")
    before = wal.stat().st_size if wal.exists() else 0
    write()
    return (wal.stat().st_size - before) // frame


# WAL frames per node commit of a 50-node chain, over four runs: 8.5 today (9.3 while events were
# a rowid table, written in the table and again in its key's index). A page more per commit shows.
NODE_FRAMES = 8.8


@pytest.mark.sqlite_only
def test_a_chain_node_commit_writes_a_bounded_number_of_wal_pages(tmp_path: Path) -> None:
    """Pages written (and synced) per node commit, counted in the WAL: the run row, the checkpoint
    and its four indexes, the events, now and then a page more where a b-tree splits or the file
    grows (its first page holds its size)."""
    store = dnb.connect(f"sqlite:///{tmp_path}/runs.db")
    assert isinstance(store, SQLiteStore)
    flow = chain(store, 50)
    assert flow.run({}).status == "completed"  # the values exist: the next runs refer to them

    def four_runs() -> None:
        for _ in range(4):
            assert flow.run({}).status == "completed"

    per_node = wal_frames(store, four_runs) / (4 * 50)
    assert per_node <= NODE_FRAMES, per_node


@pytest.mark.backends("postgres")
def test_on_postgresql_a_node_is_one_statement_in_one_round_trip(
    store_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """libpq's trace of every connection of the store, checks of pooled connections included:
    each node more in a chain adds one statement and one round trip."""
    # No poll of the run row while the nodes run: a slow machine would add some.
    monkeypatch.setattr(watch, "POLL_SECONDS", 3600.0)
    trace = tmp_path / "libpq.trace"
    configure = PostgresStore._configure
    out = trace.open("a")
    connections: list[Any] = []

    def traced(self: PostgresStore, conn: Any) -> None:
        configure(self, conn)
        conn.pgconn.trace(out.fileno())
        connections.append(conn)

    def flush_traces() -> None:
        # libpq writes its trace through a buffered C stream of its own: untracing flushes it, so
        # that the file holds every message sent so far (a busy machine left one in the buffer).
        for conn in connections:
            if not conn.closed:
                conn.pgconn.untrace()
                conn.pgconn.trace(out.fileno())

    monkeypatch.setattr(PostgresStore, "_configure", traced)
    store = dnb.connect(store_url)
    counts = {}
    for nodes in (5, 10):
        flow = chain(store, nodes, f"chain{nodes}")
        assert flow.run({}).status == "completed"  # the statements are prepared, the values stored
        flush_traces()
        start = trace.stat().st_size
        assert flow.run({}).status == "completed"
        flush_traces()
        with trace.open() as lines:
            lines.seek(start)
            messages = [line.split("\t") for line in lines.read().splitlines()]
        sent = [m[3] for m in messages if len(m) > 3 and m[1] == "F"]
        received = [m[3] for m in messages if len(m) > 3 and m[1] == "B"]
        # psycopg_pool's check of a connection is an empty query: none is sent.
        assert not [m for m in messages if len(m) > 4 and m[3] == "Query" and m[4].strip() == '""']
        counts[nodes] = (sent.count("Execute") + sent.count("Query"), received.count("ReadyForQuery"))
    out.close()
    statements, round_trips = (later - earlier for later, earlier in zip(counts[10], counts[5], strict=True))
    assert (statements, round_trips) == (5, 5), counts


@pytest.mark.sqlite_only
def test_a_chains_nodes_start_no_task_of_their_own(tmp_path: Path) -> None:
    """A wave's only node runs in the task that drives the run: a chain of ten nodes starts as
    many asyncio tasks as a chain of five (a task per node costs two turns of the loop)."""
    from durable_nb._loop import _thread_loop

    store = dnb.connect(f"sqlite:///{tmp_path}/runs.db")
    loop = _thread_loop()  # the loop the sync API runs on in this thread
    started: list[Any] = []

    def factory(loop: Any, coro: Any, **kwargs: Any) -> Any:
        started.append(coro)
        return asyncio.Task(coro, loop=loop, **kwargs)

    counts = {}
    loop.set_task_factory(factory)
    try:
        for nodes in (5, 10):
            flow = chain(store, nodes, f"chain{nodes}")
            started.clear()
            assert flow.run({}).status == "completed"
            counts[nodes] = len(started)
    finally:
        loop.set_task_factory(None)
    assert counts[10] == counts[5], counts


@pytest.mark.sqlite_only
def test_a_chain_node_costs_a_bounded_number_of_python_calls(tmp_path: Path, engine_calls: list[int]) -> None:
    """The Python calls of the engine thread (where a chain's nodes and their commits run), counted,
    never timed: each node more in a chain adds at most the budget. 135 today, 154 before the hot
    path was trimmed (each call a frame: a node's attempt, its value, its records, its commit); a
    change that adds work to every node shows here."""
    calls = engine_calls
    store = dnb.connect(f"sqlite:///{tmp_path}/runs.db")
    counts = {}
    for nodes in (10, 20):
        flow = chain(store, nodes, f"chain{nodes}")
        assert flow.run({}).status == "completed"  # the values exist, the statements are prepared
        calls[0] = 0
        assert flow.run({}).status == "completed"
        counts[nodes] = calls[0]
    per_node = (counts[20] - counts[10]) / 10
    assert per_node <= 150, counts
