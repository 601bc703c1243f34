"""A LangGraph checkpointer's calls are stepped in the calling thread: no loop turned for store calls.

``run_inline`` steps a coroutine by hand until it first waits on something; the thread's loop
then carries it on. Counted, never timed: how often a loop was started.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest
from conftest import on_the_kernel_lease_thread

from durable_nb import _loop
from durable_nb._loop import run_inline
from durable_nb.store import connect

seen: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="caller")


@pytest.fixture
def loops_started(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every coroutine a loop of this thread was started for."""
    started: list[Any] = []
    original = _loop._run_here

    def counted(loop: asyncio.AbstractEventLoop, coro: Any, context: Any = None) -> Any:
        if not on_the_kernel_lease_thread():
            started.append(coro)
        return original(loop, coro, context)

    monkeypatch.setattr(_loop, "_run_here", counted)
    return started


def test_store_calls_run_without_turning_a_loop(store_url: str, loops_started: list[Any]) -> None:
    store = connect(store_url)

    async def calls() -> int:
        await store.list_runs("nobody")
        return len(await store.list_runs())

    assert run_inline(calls()) == 0
    assert loops_started == []


def test_a_coroutine_that_waits_is_carried_on_by_the_loop(loops_started: list[Any]) -> None:
    async def waits() -> tuple[str, int, str]:
        seen.set("before")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        loop.call_soon(future.set_result, 7)
        got = await future
        await asyncio.sleep(0)
        return seen.get(), got, type(asyncio.current_task()).__name__

    assert run_inline(waits()) == ("before", 7, "Task")
    assert len(loops_started) == 1
    assert seen.get() == "caller"  # the coroutine ran in a copy of the caller's context


def test_an_error_after_a_wait_reaches_the_caller() -> None:
    async def fails() -> None:
        await asyncio.sleep(0)
        raise LookupError("after the wait")

    with pytest.raises(LookupError, match="after the wait"):
        run_inline(fails())


def test_an_error_before_any_wait_reaches_the_caller(loops_started: list[Any]) -> None:
    async def fails() -> None:
        raise LookupError("at once")

    with pytest.raises(LookupError, match="at once"):
        run_inline(fails())
    assert loops_started == []
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()  # the thread is left with no running loop


def test_under_a_running_loop_it_runs_as_run_sync() -> None:
    async def inner() -> int:
        await asyncio.sleep(0)
        return 3

    async def cell() -> int:
        return run_inline(inner())

    assert asyncio.run(cell()) == 3
