"""dnb.map_items inside a workflow node (issue 20 items 1, 2 and 4): each item a checkpoint of the
node's run, only unfinished items run again, @idempotent results reused, bad input refused."""

from __future__ import annotations

import asyncio
import concurrent.futures
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import durable_nb as dnb
from durable_nb._loop import run_sync
from durable_nb.store.sqlite import SQLiteStore


@pytest.fixture
def threads() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    pool = concurrent.futures.ThreadPoolExecutor(2)
    yield pool
    pool.shutdown()


def _lines(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


@pytest.mark.parametrize("on", ["here", "pool"])
def test_items_commit_one_by_one_and_a_resume_runs_only_unfinished_ones(
    store: dnb.Store, tmp_path: Path, threads: concurrent.futures.ThreadPoolExecutor, on: str
) -> None:
    """An item failing for good fails the node; the others stay committed and resume skips them."""
    ran, fixed = tmp_path / "ran.txt", tmp_path / "fixed"
    executor = threads if on == "pool" else None

    def square(i: int) -> int:
        with open(ran, "a") as f:
            f.write(f"{i}\n")
        if i == 13 and not fixed.exists():
            raise ValueError("item 13 is broken")
        return i * i

    flow = dnb.Workflow("map-items", store=store, sleep=_no_wait)

    @flow.node()
    def work(state: dict[str, Any]) -> dict[str, Any]:
        return {"squares": dnb.map_items(square, range(40), executor=executor, name="sq")}

    run = flow.run({})
    assert run.status == "failed" and "item 13 is broken" in (run.error or "")
    history = dnb.history(run.id, store=store)
    items = history[history["step"].str.startswith("item:")]
    assert sorted(items["item_index"].astype(int)) == [i for i in range(40) if i != 13]
    assert set(items["agent_path"]) == {"map:sq"} and set(items["step_type"]) == {"map_item"}
    # The node's own retry (retry_count=1) called map_items again: only item 13 ran again.
    assert sorted(_lines(ran)) == sorted([*range(40), 13])

    ran.unlink()
    fixed.touch()
    run = flow.resume(run.id)
    assert run.status == "completed"
    assert run.state["squares"] == [i * i for i in range(40)]
    assert _lines(ran) == [13]


def test_idempotent_calls_in_remote_items_are_paid_once_across_attempts(
    store: dnb.Store, tmp_path: Path, threads: concurrent.futures.ThreadPoolExecutor
) -> None:
    """Issue 20 item 2: a worker's @idempotent result reaches the owner with a failed attempt; the retry reuses it."""
    paid, failed_once = tmp_path / "paid.txt", tmp_path / "failed"

    @dnb.idempotent
    def charge(i: int) -> str:
        with open(paid, "a") as f:
            f.write(f"{i}\n")
        return f"receipt-{i}"

    def item(i: int) -> str:
        receipt = charge(i)
        if i == 3 and not failed_once.exists():
            failed_once.touch()
            raise ConnectionError("network dropped after the charge")
        return receipt

    flow = dnb.Workflow("map-items-paid", store=store, sleep=_no_wait)

    @flow.node()
    def work(state: dict[str, Any]) -> dict[str, Any]:
        return {"receipts": dnb.map_items(item, range(6), executor=threads, retry_count=1)}

    run = flow.run({})
    assert run.status == "completed", run.error
    assert run.state["receipts"] == [f"receipt-{i}" for i in range(6)]
    assert sorted(_lines(paid)) == list(range(6))


async def _no_wait(seconds: float) -> None:
    return None


def test_two_maps_of_one_node_keep_their_items_apart(store: dnb.Store) -> None:
    """Two names, two sets of item checkpoints; the results are each map's own."""
    flow = dnb.Workflow("map-items-two", store=store)

    @flow.node()
    def work(state: dict[str, Any]) -> dict[str, Any]:
        first = dnb.map_items(lambda i: i + 1, range(5), name="plus")
        second = dnb.map_items(lambda i: i * 10, range(5), name="times")
        return {"first": first, "second": second}

    run = flow.run({})
    assert run.state == {"first": [1, 2, 3, 4, 5], "second": [0, 10, 20, 30, 40]}
    history = dnb.history(run.id, store=store)
    paths = history[history["step"].str.startswith("item:")]["agent_path"].value_counts().to_dict()
    assert paths == {"map:plus": 5, "map:times": 5}


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda: dnb.map_items(abs, [1], name="a/b"), dnb.InvalidInput, "without '/'"),
        (lambda: dnb.map_items(42, [1]), dnb.InvalidInput, "not callable"),
        (lambda: dnb.map_items(abs, [1], retry_count=-1), dnb.InvalidInput, "retry_count"),
        (lambda: dnb.map_items(abs, [1], timeout_seconds=0), dnb.InvalidInput, "timeout_seconds"),
        (lambda: dnb.map_items(abs, [1], max_concurrency=0), dnb.InvalidInput, "max_concurrency"),
        (lambda: dnb.map_items(abs, [1], executor="dask"), dnb.ConfigurationError, "dask.distributed.Client"),
        (lambda: dnb.map_items(abs, [1]), dnb.NoActiveNode, "%%durable cell or workflow node"),
    ],
    ids=[
        "slash-in-name",
        "not-callable",
        "negative-retries",
        "zero-timeout",
        "zero-concurrency",
        "bad-executor",
        "outside-a-node",
    ],
)
def test_bad_input_is_refused_with_what_to_do(call: Any, error: type[Exception], words: str) -> None:
    """A typed error naming the problem, before anything runs."""
    with pytest.raises(error, match=words.replace("(", r"\(")):
        call()


@pytest.mark.sqlite_only
def test_items_that_finish_together_share_a_commit_each_keeping_its_checkpoint(store: dnb.Store) -> None:
    """Eight items held until all have started finish together: fewer commits than items, one checkpoint each."""
    assert isinstance(store, SQLiteStore)
    size = 8
    arrived: list[int] = []
    together: list[asyncio.Event] = []

    async def item(i: int) -> int:
        if not together:
            together.append(asyncio.Event())
        arrived.append(i)
        if len(arrived) == size:
            together[0].set()
        await together[0].wait()
        return i * i

    flow = dnb.Workflow("map-items-grouped", store=store)

    @flow.node()
    async def work(state: dict[str, Any]) -> dict[str, Any]:
        return {"squares": await dnb.amap_items(item, range(size), name="sq")}

    flow.run({"warm": True})
    arrived.clear()
    together.clear()
    items_per_commit = _items_per_commit(store)
    run = flow.run({})
    assert run.status == "completed" and run.state["squares"] == [i * i for i in range(size)]
    grouped = [n for n in items_per_commit if n]
    assert sum(grouped) == size and len(grouped) < size
    history = dnb.history(run.id, store=store)
    items = history[history["step"].str.startswith("item:")]
    assert sorted(items["item_index"].astype(int)) == list(range(size))


def test_committed_items_are_found_without_reading_the_run(store: dnb.Store, tmp_path: Path) -> None:
    """A resume after many checkpoints finds the map's committed items by a lookup of its node's rows alone."""
    fixed = tmp_path / "fixed"

    def item(i: int) -> int:
        if i == 7 and not fixed.exists():
            raise ValueError("item 7 is broken")
        return i + 1

    flow = dnb.Workflow("map-items-lookup", store=store, sleep=_no_wait)
    flow.node(lambda state: {"xs": list(range(300))}, name="source")
    flow.map(lambda state, x: x, items="xs", name="many", after="source")

    @flow.node(after="many")
    def work(state: dict[str, Any]) -> dict[str, Any]:
        return {"plus": dnb.map_items(item, range(10), name="plus")}

    run = flow.run({})
    assert run.status == "failed"
    checkpoints = len(run_sync(store.list_checkpoints(run.id)))
    assert checkpoints > 300

    reads = _count_reads(store)
    fixed.touch()
    run = flow.resume(run.id)
    assert run.status == "completed" and run.state["plus"] == [i + 1 for i in range(10)]
    assert reads.calls.get("list_checkpoints", 0) == 0
    assert reads.calls["unfinished_steps"] == 1 and reads.rows["unfinished_steps"] == 9
    # Every checkpoint the resume read, whatever the method: a few, not the run's hundreds.
    assert sum(reads.rows.values()) < 50


class _Reads:
    """The store's calls, and the rows (checkpoints, runs, …) each kind of call returned."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.rows: dict[str, int] = {}


def _count_reads(store: dnb.Store) -> _Reads:
    reads = _Reads()
    for name in ("list_checkpoints", "unfinished_steps", "history_rows", "status_rows", "node_checkpoint"):
        method = getattr(store, name)

        async def counted(*args: Any, _method: Any = method, _name: str = name, **kwargs: Any) -> Any:
            result = await _method(*args, **kwargs)
            reads.calls[_name] = reads.calls.get(_name, 0) + 1
            found = len(result) if isinstance(result, list) else int(result is not None)
            reads.rows[_name] = reads.rows.get(_name, 0) + found
            return result

        setattr(store, name, counted)
    return reads


def _items_per_commit(store: dnb.Store) -> list[int]:
    """Record, for every transaction the store's connection commits, how many map items it wrote."""
    assert isinstance(store, SQLiteStore)
    counts: list[int] = []
    written = [0]

    def trace(sql: str) -> None:
        statement = sql.strip().upper()
        if statement.startswith("INSERT INTO CHECKPOINTS") and "'item:" in sql:
            written[0] += 1
        elif statement == "COMMIT":
            counts.append(written[0])
            written[0] = 0

    def install(conn: sqlite3.Connection) -> None:
        conn.set_trace_callback(trace)

    run_sync(store._run(install))
    return counts
