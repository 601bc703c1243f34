"""Flat cost at any run size: a commit late in a long run writes what an early one did.

Counted, not timed: every statement the store's connection executes is traced, and the rows
and bytes each commit wrote are compared between the start and the end of a 5,000-node chain
and a 5,000-item map.
"""

from __future__ import annotations

import sqlite3
import statistics

import pytest

import durable_nb as dnb
from durable_nb._loop import run_sync
from durable_nb.store.sqlite import SQLiteStore

pytestmark = pytest.mark.sqlite_only

SIZE = 5_000
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


class Writes:
    """The rows and bytes each commit of one store connection wrote (SQL with its values expanded)."""

    def __init__(self, store: dnb.Store) -> None:
        assert isinstance(store, SQLiteStore)
        self.commits: list[tuple[int, int]] = []
        self._writes: list[str] = []

        def trace(sql: str) -> None:
            verb = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
            if verb == "COMMIT":
                # A run that outlasts a third of its lease renews it in a commit of its own, whenever the
                # clock says so: a busy machine adds such commits, which are not the nodes' commits measured.
                if not _is_lease_renewal(self._writes):
                    self.commits.append((len(self._writes), sum(len(w) for w in self._writes)))
                self._writes = []
            elif verb in _WRITES:
                self._writes.append(sql)

        def install(conn: sqlite3.Connection) -> None:
            conn.set_trace_callback(trace)

        run_sync(store._run(install))


def _is_lease_renewal(writes: list[str]) -> bool:
    """Whether a commit's writes are the one update of its run's row that renews the lease."""
    return len(writes) == 1 and writes[0].lstrip().upper().startswith("UPDATE RUNS")


def compare(commits: list[tuple[int, int]], early: slice, late: slice) -> None:
    """Assert the commits of ``late`` wrote the rows and (within a few digits) the bytes of ``early``."""
    rows_early = statistics.median(rows for rows, _ in commits[early])
    rows_late = statistics.median(rows for rows, _ in commits[late])
    bytes_early = statistics.median(size for _, size in commits[early])
    bytes_late = statistics.median(size for _, size in commits[late])
    assert rows_late == rows_early, (commits[early], commits[late])
    # Longer numbers (seq 5000 against 10, item 4990 against 10) may add a few characters.
    assert abs(bytes_late - bytes_early) <= 64, (bytes_early, bytes_late)


def test_commit_5000_of_a_chain_writes_what_commit_10_did(store_url: str) -> None:
    """Committing node 5,000 of a chain writes the rows and bytes node 10 wrote."""
    store = dnb.connect(store_url)
    flow = dnb.Workflow("long_chain", store=store)
    previous = None
    for index in range(SIZE):

        def step(state, index=index):
            return {"step": index % 10}

        step.__name__ = f"n{index:05d}"
        flow.node(step, after=previous)
        previous = step.__name__
    writes = Writes(store)
    run = flow.run({})
    assert run.status == "completed"
    # Commit 0 creates the run; commit k finishes node k-1.
    assert len(writes.commits) == SIZE + 1
    compare(writes.commits, slice(10, 30), slice(SIZE - 20, SIZE))


def test_item_5000_of_a_map_writes_what_item_10_did(store_url: str) -> None:
    """Committing item 5,000 of a map writes the rows and bytes item 10 wrote."""
    store = dnb.connect(store_url)
    flow = dnb.Workflow("long_map", store=store)

    @flow.map(items="docs", into="results", max_concurrency=1)
    def each(state, doc):
        return doc % 10

    writes = Writes(store)
    run = flow.run({"docs": list(range(SIZE))})
    assert run.status == "completed"
    assert run.state["results"] == [d % 10 for d in range(SIZE)]
    assert len(writes.commits) == SIZE + 1
    # Item k commits as commit k+1; the last item's commit is the map's and ends the run.
    compare(writes.commits, slice(10, 30), slice(SIZE - 20, SIZE - 1))
