"""What the widgets need from the kernel they are shown in, and nothing more.

A notebook session provides it; without one (a panel shown outside a durable kernel) the
widgets still decide gates and fork runs, and say that the run continues where its code runs.
"""

from __future__ import annotations

from typing import Protocol

from ..model import CommitResult

__all__ = ["KernelLink"]


class KernelLink(Protocol):
    """The kernel a widget is shown in: the run it is attached to, and how a decided cell continues."""

    @property
    def attached_run_id(self) -> str | None:
        """The run this kernel is attached to, if any."""
        ...

    def owner_for(self, run_id: str) -> str | None:
        """The owner a decision of ``run_id`` hands the run to (this kernel, when attached to it), or None."""
        ...

    def continue_after(self, decided: CommitResult) -> str:
        """Continue the cell whose gate ``decided`` claimed, if it belongs here; return a note for the person."""
        ...

    def switch_to(self, run_id: str) -> None:
        """Attach this kernel to another run."""
        ...
