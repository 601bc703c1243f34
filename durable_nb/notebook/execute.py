"""Run a cell's code in the user's namespace so its exceptions reach us (not via run_cell).

``shell.run_cell`` swallows exceptions, so a wrapper built on it would record failures as
successes. Here the code is compiled and executed directly, one top-level statement at a
time (so that settings a library has right after its import can be read before the cell
changes them); top-level ``await`` is allowed and driven on the kernel's own loop;
``timeout`` is a hard limit enforced with SIGALRM in the main thread.
"""

from __future__ import annotations

import ast
import inspect
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .._loop import run_sync
from ..engine.execution.policy import AttemptPolicy
from .cellcode import CellCode

__all__ = ["run_code"]

_FLAGS = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT


@contextmanager
def _deadline(seconds: float | None, node: str) -> Iterator[None]:
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise AttemptPolicy(timeout_seconds=seconds).timed_out(node, node)

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _run(code: Any, namespace: dict[str, Any]) -> Any:
    __tracebackhide__ = True
    result = eval(code, namespace)
    if inspect.iscoroutine(result):
        result = run_sync(result)
    return result


def run_code(
    cell: CellCode,
    namespace: dict[str, Any],
    filename: str,
    *,
    timeout: float | None,
    node: str,
    after_statement: Callable[[], None] | None = None,
    flags: int = 0,
) -> Any:
    """Execute the cell in ``namespace``; return the value of its last expression (or None).

    ``flags`` are the shell's compiler flags (the ``__future__`` imports the user made).
    """
    __tracebackhide__ = True
    flags |= _FLAGS
    codes = [compile(ast.Module([s], []), filename, "exec", flags=flags, dont_inherit=True) for s in cell.statements]
    last = None
    if cell.last_expr is not None:
        last = compile(cell.last_expr, filename, "eval", flags=flags, dont_inherit=True)
    with _deadline(timeout, node):
        for code in codes:
            _run(code, namespace)
            if after_statement is not None:
                after_statement()
        return _run(last, namespace) if last is not None else None
