"""The state of a run at any checkpoint, rebuilt from what each checkpoint changed.

A checkpoint row stores only what it changed: the names it set or removed, the nodes it added
to or removed from ``completed``. Now and then a row also stores the whole state after it (a
snapshot). The state at checkpoint ``seq`` of a run is the latest snapshot at or before it with
the changes after it applied; a run without one starts from its input, or, for a fork, from its
parent's state at the fork point, so a fork shares its parent's history without copying it.

The engine writes a snapshot once the checkpoints since the last one are as many as the state
has entries (and at least ``SNAPSHOT_MIN``): rebuilding reads about as many rows as the state has
entries, whatever the length of the run, and snapshots add a bounded number of bytes per
checkpoint on average.
"""

# Annotations evaluated, not strings: the named tuples below keep them as their fields' types.

import json
from collections.abc import Callable, Iterable
from typing import Any

from .._tuples import Typed
from ..model import CheckpointState, RunRecord

__all__ = [
    "SNAPSHOT_MIN",
    "StateRow",
    "apply_changes",
    "keep_rebuildable",
    "rebuild_state",
    "snapshot_due",
    "state_from_sql",
    "states_from_sql",
]

SNAPSHOT_MIN = 256


class StateRow(Typed):
    """What one checkpoint row says about the state."""

    seq: int
    changes: dict[str, str | None]
    completed_added: list[str]
    completed_removed: list[str]
    snapshot: CheckpointState | None


def snapshot_due(since_snapshot: int, entries: int) -> bool:
    """Tell whether the next checkpoint should store the whole state."""
    return since_snapshot >= max(SNAPSHOT_MIN, entries)


def apply_changes(manifest: dict[str, str], completed: dict[str, None], rows: Iterable[StateRow]) -> int:
    """Apply rows' changes in place (``completed`` as an ordered dict); return how many rows."""
    count = 0
    for row in rows:
        for name, address in row.changes.items():
            if address is None:
                manifest.pop(name, None)
            else:
                manifest[name] = address
        for node in row.completed_removed:
            completed.pop(node, None)
        for node in row.completed_added:
            completed.pop(node, None)  # completed again: it moves to the end
            completed[node] = None
        count += 1
    return count


def rebuild_state(
    run_id: str,
    seq: int | None,
    rows_since_snapshot: Callable[[str, int | None], list[StateRow]],
    get_run: Callable[[str], RunRecord | None],
    checkpoint_seq: Callable[[str, str], int | None],
) -> CheckpointState:
    """Rebuild the state of ``run_id`` at checkpoint ``seq`` (None: its latest) from stored rows.

    ``rows_since_snapshot`` returns the rows at or before ``seq`` from the latest one holding a
    snapshot (all of them if none does), in order.
    """
    rows = rows_since_snapshot(run_id, seq)
    if rows and rows[0].snapshot is not None:
        manifest = dict(rows[0].snapshot.manifest)
        completed = dict.fromkeys(rows[0].snapshot.completed)
        since = apply_changes(manifest, completed, rows[1:])
        return CheckpointState(manifest, list(completed), since)
    base = _base_state(run_id, rows_since_snapshot, get_run, checkpoint_seq)
    manifest = dict(base.manifest)
    completed = dict.fromkeys(base.completed)
    since = base.since_snapshot + apply_changes(manifest, completed, rows)
    return CheckpointState(manifest, list(completed), since)


def _base_state(
    run_id: str,
    rows_since_snapshot: Callable[[str, int | None], list[StateRow]],
    get_run: Callable[[str], RunRecord | None],
    checkpoint_seq: Callable[[str, str], int | None],
) -> CheckpointState:
    run = get_run(run_id)
    if run is None:
        return CheckpointState({}, [])
    if run.parent_run_id is not None and run.parent_checkpoint_id is not None:
        fork_point = checkpoint_seq(run.parent_run_id, run.parent_checkpoint_id)
        if fork_point is not None:
            return rebuild_state(run.parent_run_id, fork_point, rows_since_snapshot, get_run, checkpoint_seq)
    return CheckpointState(dict(run.input_manifest), [])


# The rows a rebuild needs: from the latest snapshot at or before a seq (the PRIMARY KEY's order
# finds it by walking back from the seq), or all of them when there is none.
_ROWS_SINCE_SNAPSHOT = (
    "SELECT seq, changes, completed_changes, snapshot FROM checkpoints WHERE run_id = {p} AND seq <= {p} "
    "AND seq >= COALESCE((SELECT MAX(seq) FROM checkpoints WHERE run_id = {p} AND seq <= {p} "
    "AND snapshot IS NOT NULL), 0) ORDER BY seq"
)
_CHECKPOINT_SEQ = "SELECT seq FROM checkpoints WHERE checkpoint_id = {p} AND run_id = {p}"
_LATEST = 2**62


def state_from_sql(
    execute: Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]],
    get_run: Callable[[str], RunRecord | None],
    placeholder: str,
    run_id: str,
    seq: int | None,
) -> CheckpointState:
    """Rebuild a run's state with a backend's ``execute(sql, params) -> rows``."""

    rows_sql = _ROWS_SINCE_SNAPSHOT.format(p=placeholder)
    seq_sql = _CHECKPOINT_SEQ.format(p=placeholder)

    def rows_since_snapshot(run: str, upto: int | None) -> list[StateRow]:
        limit = _LATEST if upto is None else upto
        return _state_rows(execute(rows_sql, (run, limit, run, limit)))

    def checkpoint_seq(run: str, checkpoint_id: str) -> int | None:
        found = execute(seq_sql, (checkpoint_id, run))
        return int(found[0][0]) if found else None

    return rebuild_state(run_id, seq, rows_since_snapshot, get_run, checkpoint_seq)


def _state_rows(found: list[tuple[Any, ...]]) -> list[StateRow]:
    from .rows import snapshot_from_json

    rows = []
    for row_seq, changes, completed_changes, snapshot in found:
        done = json.loads(completed_changes)
        rows.append(
            StateRow(
                row_seq,
                json.loads(changes),
                list(done.get("added", [])),
                list(done.get("removed", [])),
                snapshot_from_json(snapshot),
            )
        )
    return rows


_ROWS_BETWEEN = (
    "SELECT seq, changes, completed_changes, snapshot FROM checkpoints WHERE run_id = {p} AND seq > {p} "
    "AND seq <= {p} ORDER BY seq"
)


def states_from_sql(
    execute: Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]],
    get_run: Callable[[str], RunRecord | None],
    placeholder: str,
    run_id: str,
    seqs: Iterable[int],
) -> dict[int, CheckpointState]:
    """The states of a run at many checkpoints: one rebuild at the first, then one pass over the
    rows up to the last (a listing of n checkpoints reads each row once, not n rebuilds)."""
    wanted = sorted(set(seqs))
    if not wanted:
        return {}
    first = state_from_sql(execute, get_run, placeholder, run_id, wanted[0])
    found = {wanted[0]: first}
    manifest, completed, since = dict(first.manifest), dict.fromkeys(first.completed), first.since_snapshot
    rest = set(wanted[1:])
    between = _ROWS_BETWEEN.format(p=placeholder)
    for row in _state_rows(execute(between, (run_id, wanted[0], wanted[-1])) if rest else []):
        if row.snapshot is not None:  # the whole state after this row
            manifest, completed, since = dict(row.snapshot.manifest), dict.fromkeys(row.snapshot.completed), 0
        else:
            since += apply_changes(manifest, completed, [row])
        if row.seq in rest:
            found[row.seq] = CheckpointState(dict(manifest), list(completed), since)
    return found


def keep_rebuildable(
    doomed: Iterable[tuple[str, int]],
    rows_of: Callable[[str], list[tuple[int, bool]]],
    state_at: Callable[[str, int], CheckpointState],
    write_snapshot: Callable[[str, int, CheckpointState], None],
) -> None:
    """Before rows are deleted, give a snapshot to each kept row whose changes would lose a row
    they are rebuilt from (``rows_of(run)``: every row's seq and whether it holds a snapshot)."""
    by_run: dict[str, set[int]] = {}
    for run_id, seq in doomed:
        by_run.setdefault(run_id, set()).add(seq)
    for run_id, seqs in by_run.items():
        broken = False
        needed = []
        for seq, has_snapshot in rows_of(run_id):
            if seq in seqs:
                broken = True
            elif has_snapshot:
                broken = False
            elif broken:
                needed.append(seq)
                broken = False
        states = [(seq, state_at(run_id, seq)) for seq in needed]
        for seq, state in states:
            write_snapshot(run_id, seq, state)
