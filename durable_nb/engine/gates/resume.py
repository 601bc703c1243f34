"""The value that answers a paused run's interrupt from outside it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Resume"]


@dataclass(frozen=True, slots=True)
class Resume:
    """A value to answer a paused run's interrupt with: ``flow.resume(run_id, Resume(v))``."""

    value: Any = None
