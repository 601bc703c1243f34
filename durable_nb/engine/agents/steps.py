"""The hook through which a node's agent commits its checkpoints, apart from the journal that reads
them: every notebook cell's scope holds one, and only a cell that runs an agent needs the rest."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..state.values import ValueCodec

__all__ = ["AgentSteps", "Writer"]

# Commits its steps (the journal's Step records) in one transaction, a checkpoint each. Typed loosely:
# naming Step here would tie this hook back to the journal that imports it.
Writer = Callable[[list[Any]], Awaitable[None]]


class AgentSteps:
    """The hook a node's runner gives its scope: write one agent checkpoint on the runner's loop
    (None: the loop the agent runs on, as for a notebook cell, whose agent runs where its commits do)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop | None,
        write: Writer,
        values: ValueCodec,
        observer: Callable[[str], None] | None = None,
    ) -> None:
        self.loop = loop
        self._write = write
        self.values = values
        # Told each turn as it happens (a notebook cell shows them in its output).
        self.observer = observer
        # Told how far a map_items call has got: (name, done, total, restored, failed, final).
        self.progress: Callable[..., None] | None = None

    async def write(self, *steps: Any) -> None:
        """Commit checkpoints, one per step, in one transaction, from any thread or loop."""
        if self.loop is None or asyncio.get_running_loop() is self.loop:
            await self._write(list(steps))
            return
        # A sync node runs its agent on a loop of its own thread: the commit belongs to the runner's.
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._write(list(steps)), self.loop))
