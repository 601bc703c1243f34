"""Errors as the command line reports them: one clean line on stderr and an exit code."""

from __future__ import annotations

import os
import sys

from ..errors import (
    AlreadyResumed,
    AmbiguousRunId,
    DurableError,
    InvalidNotebookRun,
    NotCancellable,
    NotResumable,
    RunNotFound,
    RunOwnedElsewhere,
    StoreNotFound,
    UnknownGate,
)
from .output import dumps, printable

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_NOT_FOUND", "EXIT_STATE", "EXIT_USAGE", "report"]

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_STATE = 3
EXIT_NOT_FOUND = 4
EXIT_INTERRUPTED = 130


def _exit_code(error: BaseException) -> int:
    if isinstance(error, InvalidNotebookRun):
        return EXIT_USAGE  # refused before any kernel started, as argparse refuses bad usage
    if isinstance(error, RunNotFound | UnknownGate | StoreNotFound):
        return EXIT_NOT_FOUND
    if isinstance(error, AmbiguousRunId):
        return EXIT_USAGE
    if isinstance(error, AlreadyResumed | NotResumable | NotCancellable | RunOwnedElsewhere):
        return EXIT_STATE
    if isinstance(error, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    return EXIT_FAILED


def _message(error: BaseException) -> str:
    if isinstance(error, KeyboardInterrupt):
        return "interrupted"
    try:
        text = str(error)
    except Exception:  # noqa: BLE001 - a broken __str__ must not hide the error itself
        text = ""
    return text or type(error).__name__


def _line(error: BaseException) -> str:
    message = _message(error)
    if isinstance(error, DurableError | KeyboardInterrupt) or message == type(error).__name__:
        return f"error: {printable(message)}"
    # An unexpected error names its type: "OSError: [Errno 28] ..." says more than the message.
    return f"error: {type(error).__name__}: {printable(message)}"


def _silence_stdout() -> None:
    # After EPIPE (``durable-nb runs | head``), the interpreter's final flush of stdout would
    # print a second error; point the descriptor at /dev/null instead.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def report(error: BaseException, as_json: bool) -> int:
    """Print ``error`` as one line on stderr (a JSON object with --json); return its exit code."""
    code = _exit_code(error)
    if isinstance(error, BrokenPipeError):
        _silence_stdout()
    if as_json:
        line = dumps({"error": {"type": type(error).__name__, "message": _message(error), "exit_code": code}})
    else:
        line = _line(error)
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass  # stderr is gone too: the exit code is all that is left
    return code
