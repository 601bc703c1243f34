"""Run a cell's code in the user's namespace so its exceptions reach us (not via run_cell).

``shell.run_cell`` swallows exceptions, so a wrapper built on it would record failures as
successes. Here the code is compiled and executed directly, one top-level statement at a
time (so that settings a library has right after its import can be read before the cell
changes them); top-level ``await`` is allowed and driven on the kernel's own loop;
``timeout`` is a hard limit enforced with SIGALRM in the main thread.

The code is cached under the file name the shell gives a cell (what its tracebacks and the
debugger show). In a kernel, ipykernel names a cell after a murmur2 hash of its code computed in
Python one byte at a time, about 0.2 ms per kilobyte, which a %%durable cell paid a second time
for its body: the same hash over four bytes a step gives the same name for a third of that.
"""

from __future__ import annotations

import ast
import inspect
import os
import signal
import struct
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from IPython.core import inputtransformer2
from IPython.core.interactiveshell import InteractiveShell

from .._frame_room import call_with_room
from .._loop import run_sync
from ..engine.execution.policy import AttemptPolicy
from .cellcode import CellCode

__all__ = ["cache_cell", "murmur2_x86", "run_code", "transform_cell"]

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


def _run_statements(codes: list[Any], last: Any, namespace: dict[str, Any], after: Callable[[], None] | None) -> Any:
    __tracebackhide__ = True
    for code in codes:
        _run(code, namespace)
        if after is not None:
            after()
    return _run(last, namespace) if last is not None else None


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
        # A durable cell's code starts deeper than plain: see call_with_room for what that costs.
        return call_with_room(_run_statements, codes, last, namespace, after_statement)


# -- the cell's IPython syntax ------------------------------------------------------------------

# What IPython's token transformers look for: ``x = %magic``, ``x = !cmd``, ``obj?`` and lines that
# start with ``%``, ``!``, ``?``, ``,``, ``;`` or ``/``. Each needs one of ``%!?`` anywhere, or a line
# that starts with one of these.
_LINE_ESCAPES = (",", ";", "/")


def _no_ipython_syntax(lines: list[str]) -> bool:
    """Whether no token transformer of IPython's can find anything in ``lines`` (False when unsure).

    The tokenizer reads the same lines, and a line's first token is its first non-blank character.
    """
    text = "".join(lines)
    if "%" in text or "!" in text or "?" in text:
        return False
    for line in lines:
        if line.lstrip().startswith(_LINE_ESCAPES):
            return False
    return True


_TOKEN_TRANSFORMERS = [
    inputtransformer2.MagicAssign,
    inputtransformer2.SystemAssign,
    inputtransformer2.EscapedCommand,
    inputtransformer2.HelpEnd,
]


def _standard(shell: Any) -> bool:
    """Whether the shell transforms cells as IPython's own shell and transformers do."""
    manager = getattr(shell, "input_transformer_manager", None)
    return (
        getattr(type(shell), "transform_cell", None) is InteractiveShell.transform_cell
        and type(manager) is inputtransformer2.TransformerManager
        and manager.token_transformers == _TOKEN_TRANSFORMERS
    )


def transform_cell(shell: Any, raw: str) -> str:
    """Return ``shell.transform_cell(raw)``, without tokenizing a cell that holds no IPython syntax.

    IPython tokenizes every cell to find its ``%magic``, ``!cmd`` and ``obj?`` lines, a tenth of
    what a %%durable cell added to a plain one; text without their characters has none. This is
    IPython's ``transform_cell`` step by step (a test holds them equal), the tokenizing left out
    only then; a shell of another kind transforms as it does.
    """
    if not _standard(shell):
        return str(shell.transform_cell(raw))
    manager = shell.input_transformer_manager
    cell = raw if raw.endswith("\n") else raw + "\n"
    lines = cell.splitlines(keepends=True)
    for transform in manager.cleanup_transforms + manager.line_transforms:
        lines = transform(lines)
    if not _no_ipython_syntax(lines):
        lines = manager.do_token_transforms(lines)
    cell = "".join(lines)
    if len(cell.splitlines()) == 1:
        # Magics without their %, and autocall: these depend on the namespace, so IPython's own step.
        with shell.builtin_trap:
            cell = shell.prefilter_manager.prefilter_lines(cell) + "\n"
    lines = cell.splitlines(keepends=True)
    for transform in shell.input_transformers_post:
        lines = transform(lines)
    return "".join(lines)


# -- the cell's file name -------------------------------------------------------------------------

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2_x86(text: str, seed: int) -> int:
    """Return ipykernel's murmur2 hash of ``text`` (its UTF-8 bytes), the one its cell file names carry."""
    data = text.encode("utf8")
    length = len(data)
    h = seed ^ length
    rounded = length & ~3
    for k in struct.unpack(f"<{rounded >> 2}I", data[:rounded]):
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ (((k ^ (k >> 24)) * _M) & _MASK)
    tail = data[rounded:]
    if tail:
        h = ((h ^ int.from_bytes(tail, "little")) * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    return h ^ (h >> 15)


def _kernel_name(compiler: Any, source: str) -> str | None:
    """The name ipykernel's compiler gives ``source``, if it is that compiler naming as it does by default."""
    kernel = sys.modules.get("ipykernel.compiler")
    if kernel is None or getattr(type(compiler), "get_code_name", None) is not kernel.XCachingCompiler.get_code_name:
        return None
    if os.environ.get("IPYKERNEL_CELL_NAME") is not None:
        return None  # named as that says, without a hash
    return f"{kernel.get_tmp_directory()}{os.sep}{murmur2_x86(source, kernel.get_tmp_hash_seed())}.py"


def cache_cell(shell: Any, source: str, number: int) -> str:
    """Cache ``source`` in the shell's compiler as cell ``number`` and return its file name."""
    compiler = shell.compile
    name = _kernel_name(compiler, source)
    if name is None:
        return str(compiler.cache(source, number))
    # The compiler's own caching, given the name it would make: for this one call, on this thread.
    compiler.get_code_name = lambda raw_code, code, number: name
    try:
        return str(compiler.cache(source, number))
    finally:
        del compiler.get_code_name
