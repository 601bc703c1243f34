"""The schedules table, for both SQL backends: add (or keep) a schedule, list, find, delete, and move
one on to its next due time by compare-and-set.

Each function runs whole through the store's ``_run`` (its lock on SQLite, a pooled connection
on PostgreSQL). What a schedule means, and when it is due, is the service's; the store only keeps
the rows, and moves ``next_run`` only from the value the caller saw, so that two servers sharing
the store never both move it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .bulk_ops import transaction
from .dialect import Dialect

__all__ = [
    "SCHEDULE_COLUMNS",
    "ScheduleRecord",
    "advance_schedule",
    "delete_schedule",
    "get_schedule",
    "list_schedules",
    "put_schedule",
]

SCHEDULE_COLUMNS = (
    "schedule_id, cron, timezone, kind, target, input, missed, source, next_run, last_run, last_run_id, "
    "created_at, updated_at"
)


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    """A schedule as stored: when (cron, timezone), what (a workflow or a notebook, with its input),
    what to do with times passed while no server ran (``missed``), and its next and last runs."""

    schedule_id: str
    cron: str
    timezone: str
    kind: str  # "workflow" or "notebook"
    target: str  # the workflow's name, or the notebook's path in the notebooks folder
    input: dict[str, Any]  # the workflow's input, or the notebook's parameters
    missed: str  # "run-once" or "skip"
    source: str  # "api" or "command line"
    next_run: float
    last_run: float | None = None
    last_run_id: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0


def _record(row: Any) -> ScheduleRecord:
    return ScheduleRecord(
        schedule_id=str(row[0]),
        cron=str(row[1]),
        timezone=str(row[2]),
        kind=str(row[3]),
        target=str(row[4]),
        input=json.loads(row[5]),
        missed=str(row[6]),
        source=str(row[7]),
        next_run=float(row[8]),
        last_run=None if row[9] is None else float(row[9]),
        last_run_id=None if row[10] is None else str(row[10]),
        created_at=float(row[11]),
        updated_at=float(row[12]),
    )


def get_schedule(conn: Any, d: Dialect, schedule_id: str) -> ScheduleRecord | None:
    """Return one schedule, or None."""
    row = conn.execute(f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE schedule_id = {d.p}", (schedule_id,)).fetchone()
    return None if row is None else _record(row)


def list_schedules(conn: Any, d: Dialect) -> list[ScheduleRecord]:
    """Return every schedule, the soonest due first."""
    rows = conn.execute(f"SELECT {SCHEDULE_COLUMNS} FROM schedules ORDER BY next_run, schedule_id").fetchall()
    return [_record(row) for row in rows]


def put_schedule(conn: Any, d: Dialect, schedule: ScheduleRecord, now: float) -> tuple[ScheduleRecord, bool]:
    """Add a schedule, or keep the one with its id (its ``missed`` policy and source updated, its
    next and last runs kept: a time missed before stays missed); return it and whether it is new."""
    p = d.p
    with transaction(conn, d):
        found = conn.execute(f"SELECT 1 FROM schedules WHERE schedule_id = {p}", (schedule.schedule_id,)).fetchone()
        if found is None:
            conn.execute(
                f"INSERT INTO schedules ({SCHEDULE_COLUMNS}) VALUES ({', '.join([p] * 13)})",
                (
                    schedule.schedule_id,
                    schedule.cron,
                    schedule.timezone,
                    schedule.kind,
                    schedule.target,
                    json.dumps(schedule.input, sort_keys=True),
                    schedule.missed,
                    schedule.source,
                    schedule.next_run,
                    None,
                    None,
                    now,
                    now,
                ),
            )
        else:
            conn.execute(
                f"UPDATE schedules SET missed = {p}, source = {p}, updated_at = {p} WHERE schedule_id = {p}",
                (schedule.missed, schedule.source, now, schedule.schedule_id),
            )
        row = conn.execute(
            f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE schedule_id = {p}", (schedule.schedule_id,)
        ).fetchone()
    return _record(row), found is None


def delete_schedule(conn: Any, d: Dialect, schedule_id: str) -> bool:
    """Delete a schedule; return whether there was one."""
    with transaction(conn, d):
        cursor = conn.execute(f"DELETE FROM schedules WHERE schedule_id = {d.p}", (schedule_id,))
        return bool(cursor.rowcount)


def advance_schedule(
    conn: Any,
    d: Dialect,
    schedule_id: str,
    seen_next: float,
    next_run: float,
    ran_at: float | None,
    run_id: str | None,
    now: float,
) -> bool:
    """Move a schedule on to ``next_run`` if its next run is still ``seen_next`` (recording the due
    time that ran and its run, if one did); return whether it moved."""
    p = d.p
    with transaction(conn, d):
        if ran_at is None:
            cursor = conn.execute(
                f"UPDATE schedules SET next_run = {p}, updated_at = {p} WHERE schedule_id = {p} AND next_run = {p}",
                (next_run, now, schedule_id, seen_next),
            )
        else:
            cursor = conn.execute(
                f"UPDATE schedules SET next_run = {p}, last_run = {p}, last_run_id = {p}, updated_at = {p} "
                f"WHERE schedule_id = {p} AND next_run = {p}",
                (next_run, ran_at, run_id, now, schedule_id, seen_next),
            )
        return bool(cursor.rowcount)
