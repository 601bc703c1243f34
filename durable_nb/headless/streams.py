"""Stream outputs in the output notebook as JupyterLab keeps them: consecutive ones of a stream joined.

ipykernel sends what a stream holds whenever it flushes (every 0.2 s while a cell prints, before a
display, at the end), so how one cell's printing is cut into messages depends on the machine's
speed. nbclient keeps each message as an output of its own; JupyterLab's output model appends a
stream message to the output before it when that is the same stream. Joined the same way, an
output notebook depends only on what was printed, in which order: a resumed run's equals an
uninterrupted one's.
"""

from __future__ import annotations

from typing import Any

__all__ = ["StreamJoiner"]


class StreamJoiner:
    """An nbclient client mixin: a stream output right after one of the same stream is appended to it."""

    def output(self, outs: list[Any], msg: dict[str, Any], display_id: str | None, cell_index: int) -> Any:
        """Add the output as nbclient does, then join it to the previous one if both are the same stream.

        The message's own output is returned (papermill logs it: the joined text was logged already).
        """
        out = super().output(outs, msg, display_id, cell_index)  # type: ignore[misc]
        if out is None or out.get("output_type") != "stream" or len(outs) < 2 or outs[-1] is not out:
            return out
        previous = outs[-2]
        if previous.get("output_type") == "stream" and previous.get("name") == out.get("name"):
            previous["text"] += out["text"]
            outs.pop()
        return out
