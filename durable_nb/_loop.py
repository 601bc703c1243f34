"""The sync driver: run the async core from any thread, with or without a running loop.

This is the one module that deals with event loops. Three cases:

- no loop runs in this thread (a script, a worker thread): a long-lived loop of this thread
  runs the coroutine;
- a loop we created runs in this thread (sync code called from one of our coroutines):
  that loop is re-entered with nest-asyncio2;
- someone else's loop runs here (ipykernel's, a user's ``asyncio.run``): the coroutine runs
  on our own background loop while this thread waits. Re-entering a foreign loop would let
  it dispatch other work in the middle of ours: in a kernel, the next queued cell of Run All
  would start inside the current one.

Whatever runs it, the coroutine sees the caller's context variables, and an interruption
(Ctrl-C, a kernel interrupt) cancels it and lets it finish its cleanup before re-raising.

A workflow run under the sync API goes to an engine thread, whose engine loop
(``run_on_engine_loop``) calls its lone sync nodes inline (``call_outside_loop``): they see no
running loop, as on a thread of their own, and the thread's usual loop serves their sync calls.

``run_inline`` is a LangGraph checkpointer's hot path (each put from a worker thread of the
graph's): with no loop in this thread, the coroutine is stepped by hand, the loop only taking it
over if it ever waits on something; a store call does not, so most calls never turn the loop.

``run_in_place`` is the notebook's hot path (a cell's start and its commit): a coroutine that
only makes store calls runs on this thread's own loop even under someone else's loop, which
waits for the cell anyway; that spares two thread switches per call. It is stepped by hand as
``run_inline`` steps it: turning the loop for a coroutine that never waits cost a cell more
Python calls than its commit. A Ctrl-C arriving
meanwhile is held until the coroutine ends, as the background loop's caller would see it.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextvars
import functools
import signal
import threading
import types
import weakref
from collections.abc import Callable, Coroutine, Generator
from typing import Any, ParamSpec, TypeVar

__all__ = [
    "blocking",
    "call_outside_loop",
    "loop_running",
    "owns_running_loop",
    "run_blocking",
    "run_in_place",
    "run_inline",
    "run_on_engine_loop",
    "run_sync",
]

T = TypeVar("T")
P = ParamSpec("P")


class _Loops(threading.local):
    """This thread's loops: ``loop`` for its sync calls, ``engine`` for a run driven on it."""

    # Unset slots read as None: a missing attribute of a thread-local raises (and clears) an
    # AttributeError, which ``owns_running_loop`` would pay on each store call of an engine thread.
    loop: asyncio.AbstractEventLoop | None = None
    engine: asyncio.AbstractEventLoop | None = None


_local = _Loops()
_own: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
_patched: set[int] = set()
_lock = threading.Lock()
_portal: asyncio.AbstractEventLoop | None = None


def _thread_loop(slot: str = "loop") -> asyncio.AbstractEventLoop:
    # One long-lived loop per thread: creating a loop per call would cost more than the
    # store round trip it drives. Slot "engine" is a second one, for a run driven on this thread
    # (``run_on_engine_loop``): the first stays free for the sync calls of its inline nodes.
    loop: asyncio.AbstractEventLoop | None = getattr(_local, slot)
    if loop is None or loop.is_closed():
        loop = asyncio.new_event_loop()
        setattr(_local, slot, loop)
        _own.add(loop)
    return loop


def _close_idle_loops() -> None:
    # Worker threads (a thread pool's, LangGraph's) leave their loop behind when they end. Left
    # to the collector at interpreter shutdown, closing it fails noisily; close it here first.
    for loop in list(_own):
        if not loop.is_running() and not loop.is_closed():
            try:
                loop.close()
            except Exception:  # noqa: BLE001 - exiting anyway; nothing is left to run on it
                pass


atexit.register(_close_idle_loops)


def _portal_loop() -> asyncio.AbstractEventLoop:
    global _portal
    with _lock:
        if _portal is None or _portal.is_closed():
            loop = asyncio.new_event_loop()
            _own.add(loop)
            threading.Thread(target=loop.run_forever, name="durable-nb-loop", daemon=True).start()
            _portal = loop
        return _portal


def _make_reentrant(loop: asyncio.AbstractEventLoop) -> None:
    with _lock:
        if id(loop) in _patched:
            return
        import nest_asyncio2

        nest_asyncio2.apply(loop)
        _patched.add(id(loop))


def _run_here(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T], context: contextvars.Context | None = None
) -> T:
    task = loop.create_task(coro, context=context or contextvars.copy_context())
    try:
        return loop.run_until_complete(task)
    except BaseException:
        if not task.done():
            task.cancel()
            try:
                loop.run_until_complete(task)
            except BaseException:  # noqa: BLE001 - the original interruption is what we re-raise
                pass
        raise


def _run_on_portal(coro: Coroutine[Any, Any, T]) -> T:
    portal = _portal_loop()
    context = contextvars.copy_context()
    result: concurrent.futures.Future[T] = concurrent.futures.Future()
    holder: list[asyncio.Task[T]] = []

    def start() -> None:
        task = portal.create_task(coro, context=context)
        holder.append(task)

        def done(finished: asyncio.Task[T]) -> None:
            if finished.cancelled():
                result.cancel()
            elif finished.exception() is not None:
                result.set_exception(finished.exception())  # type: ignore[arg-type]
            else:
                result.set_result(finished.result())

        task.add_done_callback(done)

    portal.call_soon_threadsafe(start)
    try:
        return result.result()
    except BaseException:
        if not result.done():
            # Interrupted while waiting: cancel the work and wait for its cleanup to finish.
            portal.call_soon_threadsafe(lambda: holder and holder[0].cancel())
            try:
                concurrent.futures.wait([result], timeout=30)
            except BaseException:  # noqa: BLE001 - re-raise the original interruption below
                pass
        raise


def loop_running() -> bool:
    """Return whether an event loop runs in this thread."""
    return asyncio.events._get_running_loop() is not None


def owns_running_loop() -> bool:
    """Return whether the loop running in this thread is one of durable_nb's own."""
    # Our loops are this thread's two (``_thread_loop``'s slots) and the portal; comparing
    # with those is exact and cheaper than the weak set (this runs several times per node).
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return False
    return loop is _local.loop or loop is _portal or loop is _local.engine


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from synchronous code and return its result."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is None:
        return _run_here(_thread_loop(), coro)
    if running in _own:
        _make_reentrant(running)
        return _run_here(running, coro)
    return _run_on_portal(coro)


def run_on_engine_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion on this thread's engine loop (none may run here yet); return its result.

    The coroutine may call functions with ``call_outside_loop``: the sync API they use runs on
    this thread's other loop, as on any thread.
    """
    return _run_here(_thread_loop("engine"), coro)


def call_outside_loop(fn: Callable[..., T], *args: Any) -> T:
    """Call ``fn(*args)`` from a coroutine as if no loop ran in this thread, and return its result.

    A sync node run inline sees what it would see on a thread of its own: ``asyncio.run`` works,
    and durable_nb's sync API runs on this thread's loop (not the engine's, which waits for it).
    """
    running = asyncio.events._get_running_loop()
    asyncio.events._set_running_loop(None)
    try:
        return fn(*args)
    finally:
        asyncio.events._set_running_loop(running)


def run_in_place(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that awaits nothing but store calls to completion on this thread, and return its result.

    Under someone else's loop (a kernel's) it runs on this thread's own loop, that loop set aside
    meanwhile: it cannot dispatch anything, as it could not while this thread waited on the
    background loop. Only for coroutines that start no task meant to outlive them.
    """
    running = asyncio.events._get_running_loop()
    if running is None:
        return run_inline(coro)  # stepped by hand: a store call never waits, so the loop mostly stays still
    if running in _own or threading.current_thread() is not threading.main_thread():
        return run_sync(coro)
    handler = signal.getsignal(signal.SIGINT)
    if handler is not signal.default_int_handler:
        return run_sync(coro)  # an interrupt handler of someone else's: left as it is
    interrupted: list[int] = []
    # A commit half done is never left behind: an interrupt waits for the coroutine to end.
    signal.signal(signal.SIGINT, lambda signum, frame: interrupted.append(signum))
    asyncio.events._set_running_loop(None)
    try:
        return run_inline(coro)
    finally:
        asyncio.events._set_running_loop(running)
        signal.signal(signal.SIGINT, handler)
        if interrupted:
            raise KeyboardInterrupt


def run_inline(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from synchronous code and return its result: stepped on this
    thread, without turning a loop, until it first waits on something (a store call does not).

    From then on this thread's loop runs it. Under a running loop this is ``run_sync``.
    """
    if asyncio.events._get_running_loop() is not None:
        return run_sync(coro)
    loop = _thread_loop()
    context = contextvars.copy_context()
    # Running as under the loop: a store call sees one of ours and runs in this thread.
    asyncio.events._set_running_loop(loop)
    try:
        waiting = context.run(coro.send, None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    finally:
        asyncio.events._set_running_loop(None)
    return _run_here(loop, _carry_on(coro, waiting), context)  # type: ignore[arg-type]


@types.coroutine
def _carry_on(coro: Coroutine[Any, Any, T], waiting: Any) -> Generator[Any, Any, T]:
    """Go on, as a task of the loop, with a coroutine stepped by hand up to ``waiting`` (what it
    waits on): each result or exception the task sends in is passed on to it."""
    while True:
        try:
            sent = yield waiting
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as error:  # noqa: BLE001 - a cancellation the task throws in, passed on
            step, value = coro.throw, error
        else:
            step, value = coro.send, sent
        try:
            waiting = step(value)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


def blocking(coroutine_function: Callable[P, Coroutine[Any, Any, T]], *, inline: bool = False) -> Callable[P, T]:
    """Return the blocking twin of ``aname``, called ``name``: same parameters and docstring
    (``inline``: run by ``run_inline``, for a coroutine that mostly makes store calls)."""
    runner = run_inline if inline else run_sync

    @functools.wraps(coroutine_function)
    def twin(*args: P.args, **kwargs: P.kwargs) -> T:
        return runner(coroutine_function(*args, **kwargs))

    name = coroutine_function.__name__.removeprefix("a")
    owner = coroutine_function.__qualname__.rpartition(".")[0]
    twin.__name__ = name
    twin.__qualname__ = f"{owner}.{name}" if owner else name
    return twin


async def run_blocking(call: Callable[[], T]) -> T:
    """Run a store's blocking call: here when the loop is one of durable_nb's own (its caller
    waits anyway, and a thread hop would cost about a tenth of a commit), else on a worker
    thread, so that a loop that is not ours (a kernel's, a server's) never waits on the disk."""
    if owns_running_loop():
        return call()
    return await asyncio.to_thread(call)
