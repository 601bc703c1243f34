"""A node that keeps failing: failed run, failed:<node> checkpoint, resume re-runs only it."""

from __future__ import annotations

from collections import Counter

import pytest

import durable_nb as dnb
from durable_nb._loop import run_sync


class Flaky:
    """A switch the test flips to make a node fail or succeed."""

    broken = True


def build(store_url: str, counts: Counter[str], switch: Flaky) -> dnb.Workflow:
    flow = dnb.Workflow("etl", store=store_url)

    @flow.node(retry_count=0)
    def extract(state):
        counts["extract"] += 1
        return {"rows": [1, 2, 3]}

    @flow.node(after="extract", retry_count=0, label="Transform rows")
    def transform(state):
        counts["transform"] += 1
        if switch.broken:
            raise KeyError("missing column 'amount'")
        return {"total": sum(state["rows"])}

    @flow.node(after="transform", retry_count=0)
    def load(state):
        counts["load"] += 1
        return {"loaded": True}

    return flow


def test_failed_node_fails_the_run_with_label_and_reason(store_url: str) -> None:
    """The run is failed with ``Node '<label>' failed: <reason>``; the error keeps its type and traceback."""
    counts: Counter[str] = Counter()
    flow = build(store_url, counts, Flaky())
    run = flow.run({})
    assert run.status == "failed"
    assert run.error == "Node 'Transform rows' failed: KeyError: \"missing column 'amount'\""
    assert run.state == {"rows": [1, 2, 3]}

    checkpoints = run_sync(dnb.connect(store_url).list_checkpoints(run.id))
    assert [c.step for c in checkpoints] == ["after:extract", "failed:transform", "run_end"]
    failed = checkpoints[1]
    assert failed.queue[0] == "transform"
    assert failed.error_type == "KeyError"
    assert "raise KeyError" in (failed.traceback or "")
    assert failed.status.value == "failed"
    assert checkpoints[2].status.value == "failed"
    assert run.record.error_type == "KeyError"


def test_resume_reruns_only_the_failed_node(store_url: str) -> None:
    """After a fix, resume runs the failed node and the rest; earlier nodes never again."""
    counts: Counter[str] = Counter()
    switch = Flaky()
    flow = build(store_url, counts, switch)
    run = flow.run({})
    assert counts == Counter(extract=1, transform=1)

    switch.broken = False
    resumed = flow.resume(run.id)
    assert resumed.id == run.id
    assert resumed.status == "completed"
    assert resumed.error is None
    assert counts == Counter(extract=1, transform=2, load=1)
    assert resumed.state == {"rows": [1, 2, 3], "total": 6, "loaded": True}
    steps = list(dnb.history(run.id, store=store_url)["step"])
    assert steps == ["after:extract", "failed:transform", "run_end", "after:transform", "after:load", "run_end"]


def test_failure_without_fix_stays_resumable(store_url: str) -> None:
    """A failed run_end is stepped over, so a run can fail and be resumed repeatedly."""
    counts: Counter[str] = Counter()
    switch = Flaky()
    flow = build(store_url, counts, switch)
    run = flow.run({})
    again = flow.resume(run.id)
    assert again.status == "failed"
    switch.broken = False
    assert flow.resume(run.id).status == "completed"
    assert counts["extract"] == 1


def test_retries_are_attempts_of_one_node(store_url: str) -> None:
    """retry_count=2 runs the node up to three times, sleeping 1 then 2 seconds, before it counts as failed."""
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    flow = dnb.Workflow("retrying", store=store_url, sleep=fake_sleep)
    attempts: list[int] = []

    @flow.node(retry_count=2)
    def fetch(state):
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError("flaky network")
        return {"ok": True}

    run = flow.run({})
    assert run.status == "completed"
    assert len(attempts) == 3
    assert slept == [1.0, 2.0]


def test_default_retry_count_is_one(store_url: str) -> None:
    """Workflow nodes default to retry_count=1 (two attempts)."""

    async def no_sleep(seconds: float) -> None:
        return None

    flow = dnb.Workflow("default-retries", store=store_url, sleep=no_sleep)
    attempts: list[int] = []

    @flow.node()
    def always_fails(state):
        attempts.append(1)
        raise ValueError("boom")

    run = flow.run({})
    assert run.status == "failed"
    assert len(attempts) == 2
    events = [e.type for e in run_sync(dnb.connect(store_url).list_events(run.id))]
    assert events.count("node_retrying") == 1


def test_async_node_failure(store_url: str) -> None:
    """Async nodes fail the same way."""
    flow = dnb.Workflow("async-fail", store=store_url)

    @flow.node(retry_count=0)
    async def fetch(state):
        raise RuntimeError("upstream 503")

    run = flow.run({})
    assert run.status == "failed"
    assert run.error == "Node 'fetch' failed: RuntimeError: upstream 503"


def test_node_failed_error_pickles() -> None:
    """Errors survive pickling with their fields, since they cross processes."""
    import pickle

    error = dnb.NodeFailed("Node 'x' failed: boom", node_id="x", error_type="ValueError", traceback="tb")
    copy = pickle.loads(pickle.dumps(error))
    assert str(copy) == str(error)
    assert (copy.node_id, copy.error_type, copy.traceback) == ("x", "ValueError", "tb")
    not_found = pickle.loads(pickle.dumps(dnb.RunNotFound("abc")))
    assert not_found.run_id == "abc" and "abc" in str(not_found)


@pytest.mark.parametrize("value", [[1, 2], "text", 3])
def test_node_returning_non_dict_fails_clearly(store_url: str, value: object) -> None:
    """A node must return a dict of updates; anything else fails the node with a clear error."""
    flow = dnb.Workflow("bad-return", store=store_url)

    @flow.node(retry_count=0)
    def oops(state):
        return value

    run = flow.run({})
    assert run.status == "failed"
    assert "must be a dict" in (run.error or "")
    assert run.record.error_type == "InvalidState"
