"""Counts of what this process itself does, for a server that exposes them as metrics.

A server sets its ``Tally`` in a context variable for the requests it answers and the runs it
drives, so two apps in one process count apart and a kernel or a script, which set none, pays
one lookup per commit. The store reports each commit it made and each operation that failed
to whichever tally is current; it never imports the server.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .model import Commit

__all__ = ["Tally", "committed", "current", "store_failed"]


class Tally(Protocol):
    """What the store reports to a server's metrics."""

    def committed(self, commit: Commit) -> None:
        """Count a commit the store wrote."""

    def store_failed(self) -> None:
        """Count a store operation that failed."""


current: contextvars.ContextVar[Tally | None] = contextvars.ContextVar("durable_nb_tally", default=None)


def committed(commit: Commit) -> None:
    """Report a written commit to the current tally, if any."""
    tally = current.get()
    if tally is not None:
        tally.committed(commit)


def store_failed() -> None:
    """Report a failed store operation to the current tally, if any."""
    tally = current.get()
    if tally is not None:
        tally.store_failed()
