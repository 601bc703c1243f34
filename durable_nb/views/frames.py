"""Runs and history as pandas DataFrames with real dtypes, one store query each."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._loop import run_sync
from ..engine.ops import expire_gates
from ..model import RunStatus
from ..store import resolve_store

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ahistory", "aruns", "history", "runs"]

_RUN_COLUMNS = [
    "run_id",
    "name",
    "kind",
    "status",
    "created_at",
    "updated_at",
    "error",
    "parent_run_id",
    "parent_checkpoint_id",
    "idempotency_key",
]
_HISTORY_COLUMNS = [
    "seq",
    "checkpoint_id",
    "node_id",
    "step",
    "status",
    "created_at",
    "duration",
    "attempts",
    "error",
    "changed",
]


def _datetimes(pd: Any, values: list[float]) -> Any:
    return pd.to_datetime(pd.Series(values, dtype="float64"), unit="s", utc=True)


async def aruns(name: str | None = None, *, store: Any = None) -> pd.DataFrame:
    """Async twin of ``runs``."""
    import pandas as pd

    resolved = resolve_store(store)
    await expire_gates(resolved)  # a listing must not show a run paused past its deadline
    records = await resolved.list_runs(name)
    frame = pd.DataFrame(
        {
            "run_id": pd.Series([r.run_id for r in records], dtype="string"),
            "name": pd.Series([r.name for r in records], dtype="string"),
            "kind": pd.Categorical([r.kind.value for r in records], categories=["notebook", "workflow"]),
            "status": pd.Categorical([r.status.value for r in records], categories=[s.value for s in RunStatus]),
            "created_at": _datetimes(pd, [r.created_at for r in records]),
            "updated_at": _datetimes(pd, [r.updated_at for r in records]),
            "error": pd.Series([r.error for r in records], dtype="string"),
            "parent_run_id": pd.Series([r.parent_run_id for r in records], dtype="string"),
            "parent_checkpoint_id": pd.Series([r.parent_checkpoint_id for r in records], dtype="string"),
            "idempotency_key": pd.Series([r.idempotency_key for r in records], dtype="string"),
        },
        columns=_RUN_COLUMNS,
    )
    return frame


def runs(name: str | None = None, *, store: Any = None) -> pd.DataFrame:
    """Return one row per run, newest first: ids, name, kind, status, times, error, fork parent."""
    return run_sync(aruns(name, store=store))


async def ahistory(run: Any, *, store: Any = None) -> pd.DataFrame:
    """Async twin of ``history``."""
    import pandas as pd

    run_id = getattr(run, "id", run)
    resolved = resolve_store(store)
    await resolved.get_run(run_id)
    await expire_gates(resolved, run_id)
    checkpoints = await resolved.list_checkpoints(run_id)
    frame = pd.DataFrame(
        {
            "seq": pd.Series([c.seq for c in checkpoints], dtype="int64"),
            "checkpoint_id": pd.Series([c.checkpoint_id for c in checkpoints], dtype="string"),
            "node_id": pd.Series([c.node_id for c in checkpoints], dtype="string"),
            "step": pd.Series([c.step for c in checkpoints], dtype="string"),
            "status": pd.Categorical(
                [c.status.value for c in checkpoints],
                categories=["ok", "interrupted", "failed", "approved", "fork", "completed"],
            ),
            "created_at": _datetimes(pd, [c.created_at for c in checkpoints]),
            "duration": pd.to_timedelta(pd.Series([c.duration for c in checkpoints], dtype="float64"), unit="s"),
            "attempts": pd.Series([c.attempts for c in checkpoints], dtype="Int64"),
            "error": pd.Series([c.error for c in checkpoints], dtype="string"),
            "changed": pd.Series([sorted(c.node_output) if c.node_output else [] for c in checkpoints], dtype="object"),
        },
        columns=_HISTORY_COLUMNS,
    )
    return frame


def history(run: Any, *, store: Any = None) -> pd.DataFrame:
    """Return one row per checkpoint of a run in order: seq, ids, node, step, status, time, duration."""
    return run_sync(ahistory(run, store=store))
