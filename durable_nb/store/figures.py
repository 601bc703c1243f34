"""What a server's metrics read from the store at each scrape: a few aggregates, bounded in cost.

The figures are the store's, so they count the work of every process on it (kernels, the CLI,
other servers). Four queries, none of which grows with the history a store keeps: runs by
status walks the status index, the open gates are the small table of gates still waiting, node
durations are read only for checkpoints written since a time, through the partial index on
``created_at`` of the checkpoints that have a duration, and the schedules are a small table.
"""

from __future__ import annotations

from typing import Any

from .._tuples import Typed
from .dialect import Dialect

__all__ = ["DURATIONS_SINCE", "Figures", "read_figures"]

# Repeats the predicate of the index checkpoints_by_time, so both backends walk it.
DURATIONS_SINCE = (
    "SELECT run_id, seq, created_at, duration FROM checkpoints WHERE duration IS NOT NULL AND created_at > {p}"
)


class Figures(Typed):
    """The store's figures at one moment."""

    runs: dict[str, int]
    # Open gates: how many, and the epoch times they opened at (earliest, and summed).
    gates: int
    first_gate_at: float | None
    gate_times_sum: float
    # (run_id, seq, created_at, duration) of each checkpoint with a duration written after ``since``.
    durations: list[tuple[str, int, float, float]]
    # The schedules: how many, and the soonest next run among them.
    schedules: int = 0
    first_next_run: float | None = None


def read_figures(conn: Any, d: Dialect, since: float) -> Figures:
    """Return the figures, with the node durations of checkpoints written after the epoch time ``since``."""
    runs = {status: int(count) for status, count in conn.execute("SELECT status, COUNT(*) FROM runs GROUP BY status")}
    gates, first, summed = conn.execute(
        "SELECT COUNT(*), MIN(created_at), COALESCE(SUM(created_at), 0) FROM pending_interrupts"
    ).fetchone()
    rows = conn.execute(DURATIONS_SINCE.format(p=d.p), (since,)).fetchall()
    durations = [(str(r[0]), int(r[1]), float(r[2]), float(r[3])) for r in rows]
    schedules, soonest = conn.execute("SELECT COUNT(*), MIN(next_run) FROM schedules").fetchone()
    return Figures(
        runs,
        int(gates),
        None if first is None else float(first),
        float(summed),
        durations,
        int(schedules),
        None if soonest is None else float(soonest),
    )
