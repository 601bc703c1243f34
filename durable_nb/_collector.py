"""Pausing Python's cycle collector while durable_nb makes or walks many objects at once."""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

__all__ = ["collector_paused"]

F = TypeVar("F", bound=Callable[..., Any])


class _Paused:
    """The pause: a context manager, or a decorator that pauses around each call.

    A class, not ``contextlib.contextmanager``: a cell's commit plan is made inside one, and a
    generator-based pause cost it eight Python calls where this costs two.
    """

    __slots__ = ("_paused",)

    def __init__(self) -> None:
        self._paused = False

    def __enter__(self) -> None:
        self._paused = gc.isenabled()
        if self._paused:
            gc.disable()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if self._paused:
            gc.enable()

    def __call__(self, function: F) -> F:
        # Each call pauses on its own (a call inside a call leaves it to the outer one).
        @functools.wraps(function)
        def paused(*args: Any, **kwargs: Any) -> Any:
            if not gc.isenabled():
                return function(*args, **kwargs)
            gc.disable()
            try:
                return function(*args, **kwargs)
            finally:
                gc.enable()

        return paused  # type: ignore[return-value]


def collector_paused() -> _Paused:
    """Pause the cycle collector inside the block, if it runs; it runs again after it.

    Pickling or loading a figure, or reading a page of checkpoints, makes tens of thousands of
    objects: each collection they set off walks every object the process holds, again and again,
    while what they make is kept (a value loaded) or freed by reference counting all the same.
    A collector the caller turned off stays off; a pause inside a pause leaves it to the outer one.
    """
    return _Paused()
