"""dnb.map_items inside a workflow node (issue 20 items 1, 2 and 4): each item a checkpoint of the
node's run, only unfinished items run again, @idempotent results reused, bad input refused."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import durable_nb as dnb


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
