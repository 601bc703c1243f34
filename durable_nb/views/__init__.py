"""pandas views of runs and their history (pandas is imported only when a view is built)."""

from .frames import (
    acompare,
    aevents,
    aforks,
    ahistory,
    aruns,
    astatus,
    compare,
    events,
    forks,
    history,
    runs,
    status,
)
from .render import Styled, styled

__all__ = [
    "Styled",
    "acompare",
    "aevents",
    "aforks",
    "ahistory",
    "aruns",
    "astatus",
    "compare",
    "events",
    "forks",
    "history",
    "runs",
    "status",
    "styled",
]
