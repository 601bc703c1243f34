"""The SQLite store's reads: each is one function of a ``sqlite3`` connection (a query or a
few), run by ``SQLiteStore`` under its lock. The store reaches them through ``sqlite_ops``."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from ..model import Blob, CheckpointRecord, CheckpointState, RunRecord
from . import rows
from .blob_files import FILE_BYTES, read_hashed
from .protocol import HISTORY_COLUMNS
from .state import state_from_sql, states_from_sql


def _get_run(conn: sqlite3.Connection, run_id: str) -> RunRecord | None:
    row = conn.execute(f"SELECT {rows.RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    return None if row is None else rows.run_from_row(row)


def _list_runs(conn: sqlite3.Connection, name: str | None, statuses: list[str] | None) -> list[RunRecord]:
    conditions, params = [], []
    if name is not None:
        conditions.append("name = ?")
        params.append(name)
    if statuses is not None:
        conditions.append(f"status IN ({', '.join('?' * len(statuses))})")
        params.extend(statuses)
    where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
    cursor = conn.execute(f"SELECT {rows.RUN_COLUMNS} FROM runs {where} ORDER BY run_id DESC", params)
    return [rows.run_from_row(row) for row in cursor]


def _one_checkpoint(conn: sqlite3.Connection, run_id: str, condition: str) -> CheckpointRecord | None:
    row = conn.execute(
        f"SELECT {rows.CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = ? {condition} ORDER BY seq DESC LIMIT 1",
        (run_id,),
    ).fetchone()
    return None if row is None else rows.checkpoint_from_row(row)


def _node_checkpoint(
    conn: sqlite3.Connection, run_id: str, node_id: str, prefix: str, max_seq: int | None, agent_path: str | None
) -> CheckpointRecord | None:
    sql = (
        f"SELECT {rows.CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = ? AND node_id = ? AND seq <= ? "
        "AND substr(step, 1, ?) = ?"
    )
    params: list[Any] = [run_id, node_id, max_seq if max_seq is not None else 2**62, len(prefix), prefix]
    if agent_path is not None:
        sql += " AND (agent_path = ? OR substr(agent_path, 1, ?) = ?)"
        params += [agent_path, len(agent_path) + 6, agent_path + "/tool:"]
    row = conn.execute(sql + " ORDER BY seq DESC LIMIT 1", params).fetchone()
    return None if row is None else rows.checkpoint_from_row(row)


def _checkpoint_by_id(conn: sqlite3.Connection, run_id: str, checkpoint_id: str) -> CheckpointRecord | None:
    row = conn.execute(
        f"SELECT {rows.CHECKPOINT_COLUMNS} FROM checkpoints WHERE checkpoint_id = ? AND run_id = ?",
        (checkpoint_id, run_id),
    ).fetchone()
    return None if row is None else rows.checkpoint_from_row(row)


def _state_at(conn: sqlite3.Connection, run_id: str, seq: int | None) -> CheckpointState:
    return state_from_sql(
        lambda sql, params: conn.execute(sql, params).fetchall(), partial(_get_run, conn), "?", run_id, seq
    )


def _states_at(conn: Any, run_id: str, seqs: list[int]) -> dict[int, CheckpointState]:
    return states_from_sql(
        lambda sql, params: conn.execute(sql, params).fetchall(), partial(_get_run, conn), "?", run_id, seqs
    )


def _latest_states(conn: Any, run_ids: list[str]) -> dict[str, CheckpointState]:
    return {run_id: _state_at(conn, run_id, None) for run_id in run_ids}


def _status_rows(conn: Any, run_id: str) -> StatusRows:
    return rows.status_rows(
        lambda sql, params: conn.execute(sql, params).fetchall(), "?", run_id, _state_at(conn, run_id, None)
    )


def _list_checkpoints(conn: sqlite3.Connection, run_id: str) -> list[CheckpointRecord]:
    cursor = conn.execute(f"SELECT {rows.CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = ? ORDER BY seq", (run_id,))
    return [rows.checkpoint_from_row(row) for row in cursor]


def _pending(conn: sqlite3.Connection, run_id: str) -> list[PendingInterrupt]:
    cursor = conn.execute(
        f"SELECT {rows.INTERRUPT_COLUMNS} FROM pending_interrupts WHERE run_id = ? ORDER BY created_at",
        (run_id,),
    )
    return [rows.interrupt_from_row(row) for row in cursor]


def _expired(conn: sqlite3.Connection, now: float, run_id: str | None) -> list[PendingInterrupt]:
    sql = f"SELECT {rows.INTERRUPT_COLUMNS} FROM pending_interrupts WHERE expires_at IS NOT NULL AND expires_at <= ?"
    params: list[Any] = [now]
    if run_id is not None:
        sql += " AND run_id = ?"
        params.append(run_id)
    return [rows.interrupt_from_row(row) for row in conn.execute(sql + " ORDER BY expires_at", params)]


def _get_blobs(
    conn: sqlite3.Connection, hashes: list[str], key: bytes | None
) -> tuple[dict[str, Blob], list[tuple[str, str, int, str | None]]]:
    """Return the blobs stored in the database, and (hash, codec, size, seal) of those kept as files."""
    found: dict[str, Blob] = {}
    in_files: list[tuple[str, str, int, str | None]] = []
    # Stay under SQLite's limit on bound parameters.
    for start in range(0, len(hashes), 500):
        chunk = hashes[start : start + 500]
        cursor = conn.execute(
            "SELECT hash, codec, rowid, size, length(data), CASE WHEN size < ? THEN data END, seal FROM blobs "
            f"WHERE hash IN ({', '.join('?' * len(chunk))})",
            [FILE_BYTES, *chunk],
        )
        for value_hash, codec, rowid, size, length, data, seal in cursor.fetchall():
            if length == 0 and size > 0:
                in_files.append((value_hash, codec, size, seal))
            elif data is None:
                # Large, and stored in the database (by a version before value files): read it in
                # chunks with incremental blob I/O, without a copy of the whole row.
                with conn.blobopen("blobs", "data", rowid, readonly=True) as stored:
                    found[value_hash] = read_hashed(_reader(stored), size, value_hash, codec, key, seal)
            else:
                found[value_hash] = Blob(value_hash, codec, bytes(data), seal=seal)
    return found, in_files


def _reader(stored: sqlite3.Blob) -> Callable[[memoryview], int]:
    def read_into(view: memoryview) -> int:
        piece = stored.read(len(view))
        view[: len(piece)] = piece
        return len(piece)

    return read_into


def _get_idempotent(conn: sqlite3.Connection, run_id: str, key: str) -> str | None:
    row = conn.execute("SELECT hash FROM idempotency WHERE run_id = ? AND key = ?", (run_id, key)).fetchone()
    return None if row is None else row[0]


def _list_events(conn: sqlite3.Connection, run_id: str, after_seq: int) -> list[EventRecord]:
    cursor = conn.execute(
        f"SELECT {rows.EVENT_COLUMNS} FROM events WHERE run_id = ? AND seq > ? ORDER BY seq",
        (run_id, after_seq),
    )
    return [rows.event_from_row(row) for row in cursor]


_BYTES_WRITTEN = rows.BYTES_WRITTEN.format(
    outputs="SELECT value FROM json_each(c.node_output)", parts="json_each(g.parts)"
)

if TYPE_CHECKING:
    from ..model import EventRecord, PendingInterrupt, StatusRows


def _history_rows(conn: sqlite3.Connection, run_id: str) -> list[tuple[Any, ...]]:
    return conn.execute(
        f"SELECT {HISTORY_COLUMNS}, {_BYTES_WRITTEN} FROM checkpoints AS c WHERE c.run_id = ? ORDER BY c.seq",
        (run_id,),
    ).fetchall()


def _fork_tree(conn: sqlite3.Connection, run_id: str) -> list[tuple[RunRecord, dict[str, Any]]]:
    columns = ", ".join(f"runs.{c.strip()}" for c in rows.RUN_COLUMNS.split(","))
    return [rows.tree_row(row) for row in conn.execute(rows.FORK_TREE.format(p="?", columns=columns), (run_id,))]
