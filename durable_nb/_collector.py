"""Pausing Python's cycle collector while durable_nb makes or walks many objects at once."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cycle collector inside the block, if it runs; it runs again after it.

    Pickling or loading a figure, or reading a page of checkpoints, makes tens of thousands of
    objects: each collection they set off walks every object the process holds, again and again,
    while what they make is kept (a value loaded) or freed by reference counting all the same.
    A collector the caller turned off stays off; a pause inside a pause leaves it to the outer one.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
