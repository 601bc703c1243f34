"""Retries and timeouts: hard per-attempt timeouts, backoff, late results discarded."""

from __future__ import annotations

import asyncio
import threading
import time

import durable_nb as dnb
from durable_nb.engine.execution.policy import backoff_seconds


def recorder() -> tuple[list[float], object]:
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    return slept, fake_sleep


def test_backoff_sequence() -> None:
    """Before retry n the engine sleeps min(2**(n-1), 30) seconds."""
    assert [backoff_seconds(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 30, 30, 30]


def test_real_first_backoff_is_one_second(store_url: str) -> None:
    """The first retry really waits about a second (the one test on the real clock)."""
    flow = dnb.Workflow("real-backoff", store=store_url)
    stamps: list[float] = []

    @flow.node(retry_count=1)
    def flaky(state):
        stamps.append(time.monotonic())
        if len(stamps) == 1:
            raise ConnectionError("first attempt fails")
        return {"ok": True}

    assert flow.run({}).status == "completed"
    assert len(stamps) == 2
    assert stamps[1] - stamps[0] >= 1.0


def test_timeout_composes_with_retries_async(store_url: str) -> None:
    """Each attempt has its own timeout; a timed-out attempt is a failed attempt that is retried."""
    slept, fake_sleep = recorder()
    flow = dnb.Workflow("async-timeouts", store=store_url, sleep=fake_sleep)
    attempts: list[int] = []

    @flow.node(retry_count=3, timeout_seconds=0.2)
    async def slow_then_fast(state):
        attempts.append(1)
        if len(attempts) < 3:
            await asyncio.sleep(10)
        return {"attempt": len(attempts)}

    run = flow.run({})
    assert run.status == "completed"
    assert run.state == {"attempt": 3}
    assert len(attempts) == 3
    assert slept == [1.0, 2.0]


def test_timeouts_exhaust_retries(store_url: str) -> None:
    """When every attempt times out the run fails with NodeTimeout after retry_count + 1 attempts."""
    slept, fake_sleep = recorder()
    flow = dnb.Workflow("always-slow", store=store_url, sleep=fake_sleep)
    attempts: list[int] = []

    @flow.node(retry_count=2, timeout_seconds=0.1, label="Slow call")
    async def never_fast(state):
        attempts.append(1)
        await asyncio.sleep(10)

    run = flow.run({})
    assert run.status == "failed"
    assert run.error == "Node 'Slow call' failed: timed out after 0.1 s"
    assert run.record.error_type == "NodeTimeout"
    assert len(attempts) == 3
    assert slept == [1.0, 2.0]


def test_sync_overrun_is_abandoned_and_its_late_result_discarded(store_url: str) -> None:
    """A sync node that overruns is abandoned; its late result never reaches the state."""
    slept, fake_sleep = recorder()
    flow = dnb.Workflow("sync-timeouts", store=store_url, sleep=fake_sleep)
    finished = threading.Event()
    attempts: list[int] = []

    @flow.node(retry_count=1, timeout_seconds=0.3)
    def sometimes_slow(state):
        attempts.append(1)
        if len(attempts) == 1:
            time.sleep(1.0)
            finished.set()
            return {"who": "late first attempt"}
        return {"who": "second attempt"}

    run = flow.run({})
    assert run.status == "completed"
    assert run.state == {"who": "second attempt"}
    assert finished.wait(5)  # the abandoned thread did finish …
    time.sleep(0.1)
    stored = dnb.get_run(run.id, store=store_url).state
    assert stored == {"who": "second attempt"}  # … and its result was discarded
    steps = list(dnb.history(run.id, store=store_url)["step"])
    assert steps == ["after:sometimes_slow", "run_end"]
    assert slept == [1.0]


def test_notebook_like_zero_retries(store_url: str) -> None:
    """retry_count=0 runs a node once."""
    flow = dnb.Workflow("once", store=store_url)
    attempts: list[int] = []

    @flow.node(retry_count=0, timeout_seconds=0.1)
    def slow(state):
        attempts.append(1)
        time.sleep(0.5)
        return {}

    run = flow.run({})
    assert run.status == "failed" and "timed out" in (run.error or "")
    assert len(attempts) == 1
