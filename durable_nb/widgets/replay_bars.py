"""A replay's progress under its cell: one bar per fork (cells done of the total), kept current from a
thread that reads the store, so the kernel goes on with the next cell meanwhile."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import ipywidgets as widgets

from ..engine.cells.replays import ReplayProgress

__all__ = ["ReplayBars"]

_STYLE = {"completed": "success", "failed": "danger", "cancelled": "danger", "paused": "warning"}


def _label(progress: ReplayProgress) -> str:
    values = ", ".join(f"{name}={value!r}" for name, value in progress.values.items()) or "no change"
    waiting = " — waits at a gate (see the panel)" if progress.status.value == "paused" else ""
    return f"{values}: {progress.done}/{progress.total} cells, {progress.status.value}{waiting} (run {progress.run_id})"


class ReplayBars(widgets.VBox):
    """One progress bar per fork of a replay."""

    def __init__(self, progress: Sequence[ReplayProgress], **kwargs: Any) -> None:
        self._bars = {
            p.run_id: widgets.IntProgress(value=0, min=0, max=max(p.total, 1), layout={"width": "30%"})
            for p in progress
        }
        self._labels = {p.run_id: widgets.Label() for p in progress}
        rows = [widgets.HBox([self._bars[p.run_id], self._labels[p.run_id]]) for p in progress]
        super().__init__(rows, **kwargs)
        self._thread: threading.Thread | None = None
        self.update(progress)

    def __repr__(self) -> str:
        # Stable, whatever the forks' progress: what nbval and plain-text front ends compare.
        return f"<ReplayBars of {len(self._bars)} fork{'s' if len(self._bars) != 1 else ''}>"

    def update(self, progress: Sequence[ReplayProgress]) -> None:
        """Show how far each fork got."""
        for p in progress:
            bar = self._bars.get(p.run_id)
            if bar is None:
                continue
            bar.value = p.done
            bar.bar_style = _STYLE.get(p.status.value, "info" if p.held else "")
            self._labels[p.run_id].value = _label(p)

    def follow(
        self,
        read: Callable[[], list[ReplayProgress]],
        finished: Callable[[list[ReplayProgress]], bool],
        poll: float = 0.5,
    ) -> None:
        """Keep the bars current from a daemon thread until ``finished`` says the replay is over."""
        stop = threading.Event()

        def loop() -> None:
            while not stop.is_set():
                try:
                    progress = read()
                    self.update(progress)
                    if finished(progress):
                        return
                except Exception as error:  # noqa: BLE001 - a thread's error would vanish: say it on the bars
                    for label in self._labels.values():
                        label.value = f"progress unavailable: {type(error).__name__}: {error}"
                    return
                stop.wait(poll)

        self._stop = stop
        self._thread = threading.Thread(target=loop, name="durable-nb-replay-progress", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop following and close the widget."""
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()
        super().close()
