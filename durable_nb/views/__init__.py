"""pandas views of runs and their history (pandas is imported only when a view is built)."""

from .cells import acompare_cells, compare_cells
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
    "acompare_cells",
    "aevents",
    "aforks",
    "ahistory",
    "aruns",
    "astatus",
    "compare",
    "compare_cells",
    "events",
    "forks",
    "history",
    "runs",
    "status",
    "styled",
]
