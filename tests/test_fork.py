"""Forks: branch any checkpoint with state overrides; the original is never touched."""

from __future__ import annotations

from collections import Counter

import pytest
from conftest import execute_sql

import durable_nb as dnb
from durable_nb._loop import run_sync


def pipeline(store_url: str, counts: Counter[str]) -> dnb.Workflow:
    flow = dnb.Workflow("pricing", store=store_url)

    @flow.node()
    def load(state):
        counts["load"] += 1
        return {"prices": [10.0, 20.0, 30.0]}

    @flow.node(after="load")
    def discount(state):
        counts["discount"] += 1
        return {"discounted": [p * (1 - state["rate"]) for p in state["prices"]]}

    @flow.node(after="discount")
    def total(state):
        counts["total"] += 1
        return {"total": round(sum(state["discounted"]), 2)}

    return flow


def snapshot(url: str, run_id: str) -> dict[str, list[tuple[object, ...]]]:
    """Every stored row of a run, exactly as the database holds it."""
    return {
        table: execute_sql(url, f"SELECT * FROM {table} WHERE run_id = ? ORDER BY 1, 2", (run_id,))
        for table in ("runs", "checkpoints", "events", "pending_interrupts", "idempotency")
    }


def test_fork_from_middle_checkpoint_with_overrides(store_url: str) -> None:
    """Nodes before the fork point are not re-executed; the original's rows are byte-for-byte unchanged."""
    counts: Counter[str] = Counter()
    flow = pipeline(store_url, counts)
    original = flow.run({"rate": 0.1})
    assert original.state["total"] == 54.0
    before = snapshot(store_url, original.id)

    history = dnb.history(original.id, store=store_url)
    middle = history.loc[history["step"] == "after:load", "checkpoint_id"].item()
    forked = flow.fork(original.id, middle, state={"rate": 0.5})

    assert forked.id != original.id
    assert forked.status == "completed"
    assert forked.parent_run_id == original.id
    assert forked.parent_checkpoint_id == middle
    assert forked.state["total"] == 30.0
    assert counts == Counter(load=1, discount=2, total=2)
    assert snapshot(store_url, original.id) == before
    assert list(dnb.history(forked.id, store=store_url)["step"]) == [
        "fork:load",
        "after:discount",
        "after:total",
        "run_end",
    ]
    assert dnb.get_run(original.id, store=store_url).state["total"] == 54.0


def test_fork_defaults_to_latest_non_tombstone(store_url: str) -> None:
    """Without a checkpoint the fork starts at the latest checkpoint that is not run_end."""
    counts: Counter[str] = Counter()
    flow = pipeline(store_url, counts)
    original = flow.run({"rate": 0.0})
    forked = flow.fork(original.id, state={"note": "rerun"})
    last = dnb.history(original.id, store=store_url).iloc[-2]
    assert last["step"] == "after:total"
    assert forked.parent_checkpoint_id == last["checkpoint_id"]
    assert forked.status == "completed"
    assert forked.state["note"] == "rerun"
    assert counts == Counter(load=1, discount=1, total=1)
    # A fork has its own run_end.
    assert list(dnb.history(forked.id, store=store_url)["step"]) == ["fork:total", "run_end"]


def test_store_level_fork_only_creates(store_url: str) -> None:
    """durable_nb.fork creates a pending fork without code; the workflow's resume runs it."""
    counts: Counter[str] = Counter()
    flow = pipeline(store_url, counts)
    original = flow.run({"rate": 0.1})
    first = dnb.history(original.id, store=store_url)["checkpoint_id"].iloc[0]
    created = dnb.fork(original.id, first, state={"rate": 0.25}, store=store_url)
    assert created.status == "pending"
    assert created.state["rate"] == 0.25
    assert counts["discount"] == 1
    done = flow.resume(created.id)
    assert done.status == "completed"
    assert done.state["total"] == 45.0
    assert counts == Counter(load=1, discount=2, total=2)


def test_fork_of_failed_run_is_ordinary(store_url: str) -> None:
    """Forking a failed run with a corrected value completes the fork; the failed run stays failed."""
    flow = dnb.Workflow("divide", store=store_url)

    @flow.node(retry_count=0)
    def divide(state):
        return {"ratio": state["a"] / state["b"]}

    failed = flow.run({"a": 1, "b": 0})
    assert failed.status == "failed"
    fixed = flow.fork(failed.id, state={"b": 4})
    assert fixed.status == "completed"
    assert fixed.state["ratio"] == 0.25
    assert dnb.get_run(failed.id, store=store_url).status == "failed"


def test_fork_of_paused_run_pauses_again(store_url: str) -> None:
    """A fork of a run waiting at a gate asks the gate again in the fork."""
    flow = dnb.Workflow("gated", store=store_url)

    @flow.node()
    def review(state):
        return {"ok": dnb.gate("check", {"x": state["x"]}).approved}

    original = flow.run({"x": 1})
    forked = flow.fork(original.id, state={"x": 2})
    assert forked.status == "paused"
    assert forked.pending_interrupt["context"] == {"x": 2}
    assert dnb.get_run(original.id, store=store_url).pending_interrupt["context"] == {"x": 1}
    assert flow.approve(forked.id).status == "completed"
    assert dnb.get_run(original.id, store=store_url).status == "paused"


def test_fork_unknown_checkpoint(store_url: str) -> None:
    """Forking at a checkpoint the run does not have raises CheckpointNotFound."""
    flow = pipeline(store_url, Counter())
    run = flow.run({"rate": 0.1})
    with pytest.raises(dnb.CheckpointNotFound):
        flow.fork(run.id, "not-a-checkpoint")


def test_unchanged_values_are_shared_by_forks(store_url: str) -> None:
    """A fork stores only the values it overrides; everything else is shared by address."""
    flow = dnb.Workflow("big", store=store_url)

    @flow.node()
    def make(state):
        return {"payload": b"x" * 200_000}

    @flow.node(after="make")
    def use(state):
        return {"size": len(state["payload"]) * state["k"]}

    run = flow.run({"k": 1})
    store = dnb.connect(store_url)
    [(blob_bytes,)] = execute_sql(store_url, "SELECT SUM(size) FROM blobs")
    first = run_sync(store.list_checkpoints(run.id))[0]
    flow.fork(run.id, first.checkpoint_id, state={"k": 2})
    [(total,)] = execute_sql(store_url, "SELECT SUM(size) FROM blobs")
    grown = total - blob_bytes
    assert grown < 1_000
