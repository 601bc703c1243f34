"""Operations on many rows at once, for both SQL backends: keyed results by prefix, pending writes
by checkpoint, runs by the start of their id, checkpoints found by a field of their ``extra`` or
by the node and agent that wrote them, and deleting checkpoints or whole runs.

Each function takes a connection and runs whole through the store's ``_run`` (its lock on
SQLite, a pooled connection on PostgreSQL), in one transaction. What differs between the
backends (placeholders, JSON paths, how a transaction starts) is a ``Dialect``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from ..model import CheckpointRecord, CheckpointState, RunRecord, WriteRow
from . import rows
from .dialect import POSTGRES, SQLITE, Dialect
from .state import keep_rebuildable

__all__ = [
    "POSTGRES",
    "SQLITE",
    "Dialect",
    "checkpoint_extras",
    "checkpoint_index",
    "checkpoints_by_extra",
    "copy_pending_writes",
    "delete_runs",
    "forget_checkpoints",
    "keyed_results",
    "keyed_results_of",
    "pending_writes_of",
    "runs_by_id_prefix",
    "transaction",
    "unfinished_steps",
]

StateAt = Callable[[Any, str, int], CheckpointState]


@contextmanager
def transaction(conn: Any, d: Dialect) -> Iterator[None]:
    """Run the block in one transaction of the backend's kind (IMMEDIATE on SQLite)."""
    if not d.sqlite:
        with conn.transaction():
            yield
        return
    # IMMEDIATE, as the store's own writers: two processes never both read and then both write.
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def unfinished_steps(conn: Any, d: Dialect, run_id: str, node_id: str, agent_path: str) -> list[CheckpointRecord]:
    """Return the checkpoints of ``agent_path`` in a node since its latest ``after:`` checkpoint, in seq order."""
    # Both lookups walk the (run_id, node_id, seq) index: the node's rows since it last finished,
    # found from its newest backwards, whatever the length of the run.
    finished = (
        f"SELECT seq FROM checkpoints WHERE run_id = {d.p} AND node_id = {d.p} AND substr(step, 1, 6) = 'after:' "
        "ORDER BY seq DESC LIMIT 1"
    )
    sql = (
        f"SELECT {rows.CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = {d.p} AND node_id = {d.p} "
        f"AND seq > COALESCE(({finished}), 0) AND agent_path = {d.p} ORDER BY seq"
    )
    params = (run_id, node_id, run_id, node_id, agent_path)
    return [rows.checkpoint_from_row(row) for row in conn.execute(sql, params).fetchall()]


def keyed_results(conn: Any, d: Dialect, run_id: str, prefix: str) -> list[tuple[str, str]]:
    """Return (key, value address) of a run's keyed results whose key starts with ``prefix``."""
    sql = f"SELECT key, hash FROM idempotency WHERE run_id = {d.p} AND substr(key, 1, CAST({d.p} AS INTEGER)) = {d.p}"
    return [(str(k), str(h)) for k, h in conn.execute(sql, (run_id, len(prefix), prefix)).fetchall()]


def keyed_results_of(conn: Any, d: Dialect, run_id: str, prefixes: Sequence[str]) -> list[tuple[str, str]]:
    """Return (key, value address) of a run's keyed results whose key starts with one of ``prefixes``."""
    by_length: dict[int, list[str]] = {}
    for prefix in dict.fromkeys(prefixes):
        by_length.setdefault(len(prefix), []).append(prefix)
    if not by_length:
        return []
    # One scan of the run's keys whatever the number of prefixes: an IN list per prefix length.
    tests, params = [], [run_id]
    for length, group in by_length.items():
        tests.append(f"substr(key, 1, CAST({d.p} AS INTEGER)) IN {_in(d, group)}")
        params += [length, *group]
    sql = f"SELECT key, hash FROM idempotency WHERE run_id = {d.p} AND ({' OR '.join(tests)})"
    return [(str(k), str(h)) for k, h in conn.execute(sql, params).fetchall()]


def pending_writes_of(conn: Any, d: Dialect, run_id: str, checkpoint_ids: Sequence[str]) -> list[WriteRow]:
    """Return a run's pending writes stored under any of ``checkpoint_ids``, in one query."""
    wanted = list(dict.fromkeys(checkpoint_ids))
    if not wanted:
        return []
    sql = f"SELECT {rows.WRITE_COLUMNS} FROM pending_writes WHERE run_id = {d.p} AND checkpoint_id IN {_in(d, wanted)}"
    return [WriteRow(*row) for row in conn.execute(sql, (run_id, *wanted)).fetchall()]


def copy_pending_writes(conn: Any, d: Dialect, source: str, target: str) -> None:
    """Copy a run's pending writes to another run (one statement; those it holds already stay)."""
    with transaction(conn, d):
        conn.execute(
            f"INSERT INTO pending_writes (run_id, {rows.WRITE_COLUMNS}, created_at) "
            f"SELECT {d.p}, {rows.WRITE_COLUMNS}, created_at FROM pending_writes WHERE run_id = {d.p} "
            "ON CONFLICT (run_id, checkpoint_id, task_id, idx) DO NOTHING",
            (target, source),
        )


def checkpoint_index(conn: Any, d: Dialect, run_id: str) -> list[tuple[int, str]]:
    """Return (seq, checkpoint id) of a run's checkpoints in seq order: two columns, nothing decoded."""
    sql = f"SELECT seq, checkpoint_id FROM checkpoints WHERE run_id = {d.p} ORDER BY seq"
    return [(int(seq), str(checkpoint_id)) for seq, checkpoint_id in conn.execute(sql, (run_id,)).fetchall()]


def checkpoint_extras(
    conn: Any, d: Dialect, state_at: StateAt, run_id: str, seqs: Sequence[int]
) -> dict[int, tuple[dict[str, Any], dict[str, str]]]:
    """Return the ``extra`` and the state's manifest of a run's checkpoints (by seq): the state just
    before the first, then one pass over the rows up to the last, decoding only those columns."""
    wanted = set(seqs)
    if not wanted:
        return {}
    first, last = min(wanted), max(wanted)
    manifest = dict(state_at(conn, run_id, first - 1).manifest)
    sql = (
        f"SELECT seq, changes, snapshot, extra FROM checkpoints WHERE run_id = {d.p} AND seq >= {d.p} "
        f"AND seq <= {d.p} ORDER BY seq"
    )
    found: dict[int, tuple[dict[str, Any], dict[str, str]]] = {}
    loads = rows.decode_json  # orjson's one call in C where it reads what json reads
    for seq, changes, snapshot, extra in conn.execute(sql, (run_id, first, last)).fetchall():
        if snapshot is not None:  # the whole state after this row
            manifest = dict(loads(snapshot)["manifest"])
        else:
            for name, address in loads(changes).items():
                if address is None:
                    manifest.pop(name, None)
                else:
                    manifest[name] = address
        if seq in wanted:
            found[seq] = (loads(extra) if extra else {}, dict(manifest))
    return found


def ping(conn: Any) -> None:
    """Read one row of the runs table: the database answers and holds the store's tables."""
    conn.execute("SELECT 1 FROM runs LIMIT 1").fetchall()


def runs_by_id_prefix(conn: Any, d: Dialect, prefix: str, limit: int) -> list[RunRecord]:
    """Return up to ``limit`` runs whose id starts with ``prefix``, in id order."""
    # substr, not LIKE: an id's '_' or '%' would be a wildcard, and PostgreSQL's collation would
    # make a range comparison skip punctuation.
    sql = (
        f"SELECT {rows.RUN_COLUMNS} FROM runs WHERE substr(run_id, 1, CAST({d.p} AS INTEGER)) = {d.p} "
        f"ORDER BY run_id LIMIT {d.p}"
    )
    return [rows.run_from_row(row) for row in conn.execute(sql, (len(prefix), prefix, limit)).fetchall()]


def checkpoints_by_extra(conn: Any, d: Dialect, path: Sequence[str], values: Sequence[str]) -> list[CheckpointRecord]:
    """Return the checkpoints, in any run, whose ``extra`` holds one of ``values`` at ``path``."""
    if not values:
        return []
    sql = (
        f"SELECT {rows.CHECKPOINT_COLUMNS} FROM checkpoints WHERE {d.extra_at()} IN {_in(d, list(values))} "
        "ORDER BY run_id, seq"
    )
    return [rows.checkpoint_from_row(row) for row in conn.execute(sql, [d.path_parameter(path), *values])]


def _in(d: Dialect, items: list[Any]) -> str:
    return f"({', '.join([d.p] * len(items))})"


def _delete_rows(conn: Any, d: Dialect, run_ids: list[str]) -> None:
    # The run rows first: on PostgreSQL, pending writes being stored hold their run's row, so the
    # delete waits for them to commit and then deletes them too.
    for table in ("runs", "checkpoints", "events", "idempotency", "pending_interrupts", "pending_writes"):
        conn.execute(f"DELETE FROM {table} WHERE run_id IN {_in(d, run_ids)}", run_ids)


def delete_runs(conn: Any, d: Dialect, run_ids: list[str]) -> None:
    """Delete runs with everything they hold (their values stay until garbage collection)."""
    if run_ids:
        with transaction(conn, d):
            _delete_rows(conn, d, run_ids)


def forget_checkpoints(
    conn: Any, d: Dialect, state_at: StateAt, doomed: Mapping[str, Sequence[tuple[int, str]]]
) -> list[str]:
    """Delete checkpoints (run -> [(seq, id its pending writes are stored under, or "")]) with those
    writes; return the runs left with no checkpoint, which are deleted too.

    A kept checkpoint whose state was rebuilt from a deleted one gets the whole state first. The
    run's head moves on, so that a writer elsewhere that remembers the state at a deleted head
    finds its next commit refused and reads again.
    """
    if not doomed:
        return []
    p = d.p
    with transaction(conn, d):
        keep_rebuildable(
            [(run_id, seq) for run_id, items in doomed.items() for seq, _ in items],
            lambda run_id: conn.execute(
                f"SELECT seq, snapshot IS NOT NULL FROM checkpoints WHERE run_id = {p} ORDER BY seq", (run_id,)
            ).fetchall(),
            lambda run_id, seq: state_at(conn, run_id, seq),
            lambda run_id, seq, state: conn.execute(
                f"UPDATE checkpoints SET snapshot = {p} WHERE run_id = {p} AND seq = {p}",
                (rows.snapshot_json(state), run_id, seq),
            ),
        )
        emptied = []
        for run_id, items in doomed.items():
            for seq, writes_of in items:
                conn.execute(f"DELETE FROM checkpoints WHERE run_id = {p} AND seq = {p}", (run_id, seq))
                if writes_of:
                    conn.execute(
                        f"DELETE FROM pending_writes WHERE run_id = {p} AND checkpoint_id = {p}", (run_id, writes_of)
                    )
            conn.execute(f"UPDATE runs SET head_seq = head_seq + 1 WHERE run_id = {p}", (run_id,))
            if conn.execute(f"SELECT 1 FROM checkpoints WHERE run_id = {p} LIMIT 1", (run_id,)).fetchone() is None:
                emptied.append(run_id)
        if emptied:
            _delete_rows(conn, d, emptied)
    return emptied
