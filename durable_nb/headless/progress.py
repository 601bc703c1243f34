"""Progress of a headless notebook run: a bar on a terminal, one plain line per cell otherwise.

Both say how many cells are done out of how many, how many were restored from checkpoints and
how many executed; the bar also shows the cell running now and how long it has been running.
Warnings a cell raised (a value that could not be stored, a setting not re-applied) are printed
in full either way, since the output notebook leaves durable_nb's notes out.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any, Protocol

from ..model import format_seconds

__all__ = ["BarProgress", "CellProgress", "LogProgress", "Tally", "progress_for"]


@dataclass
class Tally:
    """Cells done so far, and how each got its outputs."""

    total: int
    restored: int = 0
    executed: int = 0

    @property
    def done(self) -> int:
        """Cells finished, restored or executed."""
        return self.restored + self.executed

    def count(self, restored: bool) -> None:
        """Count one finished cell."""
        if restored:
            self.restored += 1
        else:
            self.executed += 1

    def summary(self) -> str:
        """``restored 3 · executed 5``."""
        return f"restored {self.restored} · executed {self.executed}"


class CellProgress(Protocol):
    """What the runner tells the progress display."""

    tally: Tally

    def started(self, label: str) -> None:
        """A cell starts."""

    def finished(self, label: str, restored: bool, seconds: float, warnings: list[str]) -> None:
        """A cell finished (restored from its checkpoint, or executed)."""

    def close(self) -> None:
        """The run stopped (completed, failed or paused)."""


class LogProgress:
    """One line per finished cell, for logs and pipes: ``[4/8] train executed in 1.52 s``."""

    def __init__(self, total: int, say: Callable[[str], None]) -> None:
        self.tally = Tally(total)
        self.say = say

    def started(self, label: str) -> None:
        """Nothing to print until the cell finishes."""

    def finished(self, label: str, restored: bool, seconds: float, warnings: list[str]) -> None:
        """Print the cell's line and its warnings."""
        self.tally.count(restored)
        how = "restored from checkpoint" if restored else f"executed in {format_seconds(seconds, compound=True)}"
        self.say(f"[{self.tally.done}/{self.tally.total}] {label} {how}")
        for text in warnings:
            self.say(f"  warning: {text}")

    def close(self) -> None:
        """Nothing to close."""


class BarProgress:
    """A tqdm bar on a terminal, with the running cell and its elapsed time ticking once a second."""

    def __init__(self, total: int, stream: IO[str], title: str) -> None:
        from tqdm import tqdm

        self.tally = Tally(total)
        # A terminal that reports no size (a pty nobody sized) would get an empty bar.
        sized = _columns(stream) > 0
        self.bar = tqdm(
            total=total,
            desc=title,
            unit="cell",
            file=stream,
            dynamic_ncols=sized,
            ncols=None if sized else 100,
            nrows=None if sized else 24,
            leave=True,
        )
        self._current: tuple[str, float] | None = None
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="durable-nb-progress", daemon=True)
        self._ticker.start()

    def _postfix(self) -> str:
        text = self.tally.summary()
        if self._current is not None:
            label, since = self._current
            elapsed = time.monotonic() - since
            # Whole seconds while it ticks: a running cell's milliseconds are noise.
            text += f" · {label} {format_seconds(elapsed, compound=True) if elapsed >= 60 else f'{int(elapsed)} s'}"
        return text

    def _tick(self) -> None:
        # Only the elapsed time of the running cell changes between cells: redraw it each second.
        while not self._stop.wait(1.0):
            if self._current is not None:
                self.bar.set_postfix_str(self._postfix(), refresh=True)

    def started(self, label: str) -> None:
        """Show the cell now running."""
        self._current = (label, time.monotonic())
        self.bar.set_postfix_str(self._postfix(), refresh=True)

    def finished(self, label: str, restored: bool, seconds: float, warnings: list[str]) -> None:
        """Advance the bar; print warnings above it."""
        self._current = None
        self.tally.count(restored)
        for text in warnings:
            self.bar.write(f"warning in {label}: {text}")
        self.bar.set_postfix_str(self._postfix(), refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        """Stop the ticker and leave the bar where it ended."""
        self._stop.set()
        self._ticker.join()
        self._current = None
        self.bar.set_postfix_str(self._postfix(), refresh=False)
        self.bar.close()


def _columns(stream: Any) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return 0


def progress_for(total: int, title: str, say: Callable[[str], None], stream: Any) -> CellProgress:
    """A bar when ``stream`` is a terminal, plain lines through ``say`` otherwise."""
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        return BarProgress(total, stream, title)
    return LogProgress(total, say)
