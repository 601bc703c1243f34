"""The JSON shapes of runs, checkpoints and events in the service's answers."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from ..model import EventRecord, RunRecord

__all__ = ["event_json", "history_json", "run_json"]


def _time(seconds: float | None) -> str | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC).isoformat()


def run_json(run: RunRecord) -> dict[str, Any]:
    """One run as listed: ids, name, kind, status, times, checkpoints, error, fork parent."""
    return {
        "run_id": run.run_id,
        "name": run.name,
        "kind": run.kind.value,
        "status": run.status.value,
        "created_at": _time(run.created_at),
        "updated_at": _time(run.updated_at),
        "checkpoints": run.head_seq,
        "error": run.error,
        "parent_run_id": run.parent_run_id,
        "parent_checkpoint_id": run.parent_checkpoint_id,
    }


def event_json(event: EventRecord) -> dict[str, Any]:
    """One event: its sequence number, type, node, time and data."""
    return {
        "seq": event.seq,
        "type": str(event.type),
        "node_id": event.node_id,
        "at": _time(event.at),
        "data": event.data,
    }


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if hasattr(value, "total_seconds"):  # a duration, before isoformat: timedeltas have both
        return None if str(value) == "NaT" else value.total_seconds()
    if hasattr(value, "isoformat"):
        return None if str(value) == "NaT" else value.isoformat()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item"):  # a numpy scalar
        return _plain(value.item())
    return str(value)


def history_json(frame: Any) -> list[dict[str, Any]]:
    """A history DataFrame as JSON rows (times as ISO text, durations in seconds, missing as null)."""
    rows = frame.astype(object).where(frame.notna(), None).to_dict("records")
    return [{key: _plain(value) for key, value in row.items()} for row in rows]
