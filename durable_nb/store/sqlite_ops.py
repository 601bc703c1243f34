"""The SQLite store's operations: each is one function of a ``sqlite3`` connection, run whole
(one transaction at most) by ``SQLiteStore`` under its lock.

The writes (create a run, commit, prune, delete value files nothing refers to) are here; the
reads are in ``sqlite_reads``, and named here too: the store finds every operation in this
module, as it finds PostgreSQL's in ``postgres_ops``."""

from __future__ import annotations

import os
import sqlite3
from dataclasses import replace
from functools import partial
from itertools import compress, repeat
from operator import is_not
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import RunNotFound
from ..model import (
    Blob,
    Commit,
    CommitResult,
    NewRun,
    RunRecord,
    RunStatus,
    WriteRow,
)
from ..model.records import evolve
from . import rows
from .blob_files import BlobFolder, FileBlob, FileVanished
from .ddl import live_blobs
from .rules import check_expectations, choose_claim, trusted_seen, updated_run, writes_only
from .sqlite_reads import (
    _checkpoint_by_id,
    _expired,
    _fork_tree,
    _get_blobs,
    _get_idempotent,
    _get_run,
    _history_rows,
    _latest_states,
    _list_checkpoints,
    _list_events,
    _list_runs,
    _node_checkpoint,
    _one_checkpoint,
    _pending,
    _state_at,
    _states_at,
    _status_rows,
)
from .state import keep_rebuildable

if TYPE_CHECKING:
    from collections.abc import Container

    from ..model import PruneReport

# What the SQLite store calls through this module (SQLStore's ``_sql``): the writes, then the reads.
__all__ = [
    "FILE_ATTEMPTS",
    "STALE_WRITE_SECONDS",
    "_create_run",
    "_commit",
    "_put_step",
    "_store_writes",
    "_delete_unreferenced",
    "_prune",
    "_checkpoint_by_id",
    "_expired",
    "_fork_tree",
    "_get_blobs",
    "_get_idempotent",
    "_get_run",
    "_history_rows",
    "_latest_states",
    "_list_checkpoints",
    "_list_events",
    "_list_runs",
    "_node_checkpoint",
    "_one_checkpoint",
    "_pending",
    "_state_at",
    "_states_at",
    "_status_rows",
]


class _Transaction:
    """BEGIN IMMEDIATE … COMMIT, rolled back on any exception."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is None:
            try:
                self.conn.execute("COMMIT")
            except sqlite3.Error:
                self._rollback()  # a COMMIT that failed (a full disk) must not leave the transaction open
                raise
        else:
            self._rollback()

    def _rollback(self) -> None:
        if not self.conn.in_transaction:
            return
        try:
            self.conn.execute("ROLLBACK")
        except sqlite3.Error:
            # SQLite has rolled a failed write back itself (a full disk, an I/O error); the
            # operation's own error is the one to report.
            pass


_INSERT_BLOB_ROWS = "INSERT OR IGNORE INTO blobs (hash, codec, size, created_at, data, parts) VALUES "
_INSERT_CHECKPOINT = (
    f"INSERT INTO checkpoints ({rows.CHECKPOINT_COLUMNS}) VALUES ({', '.join('?' * rows.CHECKPOINT_COUNT)})"
)
_INSERT_EVENT = f"INSERT INTO events ({rows.EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"
_INSERT_INTERRUPT = f"INSERT INTO pending_interrupts ({rows.INTERRUPT_COLUMNS}) VALUES ({', '.join('?' * 9)})"


# Statements with NULL written in place of the parameters that are None, by statement and by
# which parameters are None. sqlite3 binds a None only after looking for an adapter of it,
# which raises and clears an AttributeError each time: a node's checkpoint and run row have a
# dozen or more, and a NULL written in the statement is the same value, bound for free.
_WITH_NULLS: dict[tuple[str, bytes], str] = {}
_WITH_NULLS_KEPT = 256


def _execute(conn: sqlite3.Connection, sql: str, values: tuple[Any, ...]) -> sqlite3.Cursor:
    """Execute ``sql`` (whose only ``?`` are its parameters) with NULL written for each None value."""
    kept = bytes(map(is_not, values, repeat(None)))  # 1 for a value bound, 0 for a None
    if 0 not in kept:
        return conn.execute(sql, values)
    key = (sql, kept)
    text = _WITH_NULLS.get(key)
    if text is None:
        parts = sql.split("?")
        text = parts[0] + "".join(("?" if keep else "NULL") + part for keep, part in zip(kept, parts[1:], strict=True))
        if len(_WITH_NULLS) >= _WITH_NULLS_KEPT:
            _WITH_NULLS.clear()  # shapes seldom vary: a bound that is never reached in practice
        _WITH_NULLS[key] = text
    return conn.execute(text, tuple(compress(values, kept)))


# Rows per INSERT of values or pending writes: a commit's few rows in one statement, and few
# statement texts (each size and shape is one) in the connection's statement cache.
_ROWS_PER_INSERT = 8
_BLOB_ROW = {True: "(?, ?, ?, ?, ?, ?)", False: "(?, ?, ?, ?, ?, NULL)"}
_INSERT_BLOBS: dict[tuple[bool, ...], str] = {}
# Values of this size or less are bound as a bytearray, which sqlite3 binds as it is: bytes it
# binds only after looking for an adapter of them (about 3,000 instructions, a copy's tenfold).
_COPIED_BYTES = 4096


def _insert_blobs(conn: sqlite3.Connection, blobs: list[Blob], now: float) -> None:
    for start in range(0, len(blobs), _ROWS_PER_INSERT):
        values: list[Any] = []
        shape: list[bool] = []  # per row: does it list parts (else NULL is written for them)
        for blob in blobs[start : start + _ROWS_PER_INSERT]:
            data = blob.data
            if isinstance(blob, FileBlob):
                # Holding the write lock: a prune cannot delete the file between this check and the row.
                if not os.path.exists(blob.path):
                    raise FileVanished(blob.path)
                size = blob.stored_size
            else:
                size = len(data)
                if size <= _COPIED_BYTES:
                    data = bytearray(data)
            values += (blob.hash, blob.codec, size, now, data)
            if blob.parts:
                values.append(rows.dumps(list(blob.parts)))
            shape.append(bool(blob.parts))
        key = tuple(shape)
        sql = _INSERT_BLOBS.get(key)
        if sql is None:
            if len(_INSERT_BLOBS) >= _WITH_NULLS_KEPT:
                _INSERT_BLOBS.clear()
            sql = _INSERT_BLOBS[key] = _INSERT_BLOB_ROWS + ", ".join([_BLOB_ROW[parts] for parts in shape])
        conn.execute(sql, values)


def _write_children(
    conn: sqlite3.Connection, run: RunRecord, commit: Commit | NewRun, blobs: list[Blob], now: float
) -> rows.Written:
    if blobs:
        _insert_blobs(conn, blobs, now)
    for offset, draft in enumerate(commit.checkpoints, start=1):
        _execute(conn, _INSERT_CHECKPOINT, rows.checkpoint_values(run.run_id, run.head_seq + offset, now, draft))
    if commit.events:
        conn.executemany(
            _INSERT_EVENT,
            [
                # The type as plain text: sqlite3 binds an str subclass (the enum) only after an adapter lookup.
                (run.run_id, run.event_seq + offset, str(e.type), e.node_id, now, rows.dumps(e.data))
                for offset, e in enumerate(commit.events, start=1)
            ],
        )
    return rows.Written(run.run_id, run.head_seq, now, commit.checkpoints)


def _create_run(conn: sqlite3.Connection, new: NewRun, now: float) -> tuple[RunRecord, bool]:
    with _Transaction(conn):
        if new.idempotency_key is not None:
            row = conn.execute(
                f"SELECT {rows.RUN_COLUMNS} FROM runs WHERE name = ? AND idempotency_key = ?",
                (new.name, new.idempotency_key),
            ).fetchone()
            if row is not None:
                return rows.run_from_row(row), False
        run = rows.run_from_new(new, now)
        # Children are numbered from zero; the row then records how many were written.
        _write_children(conn, replace(run, head_seq=0, event_seq=0), new, new.blobs, now)
        conn.execute(
            f"INSERT INTO runs ({rows.RUN_COLUMNS}) VALUES ({', '.join('?' * 17)})",
            rows.run_values(run),
        )
        return run, True


# Indexed by whether the UPDATE sets the status (see rows.run_update).
_UPDATE_RUN = {True: rows.UPDATE_RUN.format(p="?"), False: rows.UPDATE_RUN_SAME_STATUS.format(p="?")}
_SEEN = rows.SEEN_CONDITION.format(p="?", same="IS")
# By whether it sets the status and how many values it checks the store holds.
_UPDATE_SEEN_RUN = {(sets, 0): f"{sql} AND {_SEEN}" for sets, sql in _UPDATE_RUN.items()}


def _held(blobs: list[Blob], held: Container[str]) -> tuple[list[Blob], list[str]]:
    """Split a commit's values into those to write and the addresses of those this process
    stored before (``held``), which the commit checks the store still holds instead of writing."""
    if not held:
        return blobs, []
    written: list[Blob] = []
    checked: list[str] = []
    for blob in blobs:  # a loop, not two comprehensions: a commit holds a value or two
        if blob.hash in held:
            checked.append(blob.hash)
        else:
            written.append(blob)
    return written, checked


def _update_seen_run(sets: bool, checked: int) -> str:
    sql = _UPDATE_SEEN_RUN.get((sets, checked))
    if sql is None:
        sql = _UPDATE_SEEN_RUN[sets, checked] = _UPDATE_SEEN_RUN[sets, 0] + rows.blobs_held(checked, "?")
    return sql


def _commit(conn: sqlite3.Connection, commit: Commit, now: float, url: str, held: Container[str] = ()) -> CommitResult:
    """Write a commit in one transaction; a value whose address is in ``held`` (values this
    process stored before) is checked to be in the store rather than written again."""
    seen = writes_only(commit)
    if seen is not None:
        return _commit_writes(conn, seen, commit, now, url, held)
    with _Transaction(conn):
        seen = trusted_seen(commit)
        if seen is not None:
            # A running node's commit: one conditional UPDATE checks the row (and that the store
            # still holds the values stored before: a prune may have deleted one) and writes it.
            after = updated_run(seen, commit, now, len(commit.checkpoints), len(commit.events))
            sets, values = rows.run_update(seen, after)
            # A cell's or a node's commit holds no value stored before: no split, no other statement.
            blobs, checked = _held(commit.blobs, held) if held else (commit.blobs, [])
            update = _update_seen_run(sets, len(checked)) if checked else _UPDATE_SEEN_RUN[sets, 0]
            if _execute(conn, update, (*values, *rows.seen_values(seen), *checked)).rowcount:
                return CommitResult(after, _write_rest(conn, seen, commit, now, blobs))
        run = _get_run(conn, commit.run_id)
        if run is None:
            raise RunNotFound(commit.run_id, url)
        check_expectations(run, commit)
        claimed = None
        still_pending = 0
        if commit.claim is not None:
            pending = _pending(conn, run.run_id)
            claimed = choose_claim(run.run_id, commit.claim, pending, commit.claim_gate)
            still_pending = len(pending) - 1
            conn.execute(
                "DELETE FROM pending_interrupts WHERE run_id = ? AND node_id = ?",
                (run.run_id, claimed.node_id),
            )
        checkpoints = _write_rest(conn, run, commit, now, commit.blobs)
        after = updated_run(run, commit, now, len(commit.checkpoints), len(commit.events), still_pending)
        sets, values = rows.run_update(run, after)
        _execute(conn, _UPDATE_RUN[sets], values)
        return CommitResult(after, checkpoints, claimed)


def _commit_writes(
    conn: sqlite3.Connection, seen: RunRecord, commit: Commit, now: float, url: str, held: Container[str]
) -> CommitResult:
    _store_writes(conn, seen.run_id, commit.writes, commit.blobs, now, url, held)
    return CommitResult(seen, [])


def _store_writes(
    conn: sqlite3.Connection,
    run_id: str,
    writes: list[WriteRow],
    blobs: list[Blob],
    now: float,
    url: str,
    held: Container[str] = (),
) -> None:
    """Store pending writes alone: their values and rows, while the run exists (the run row is
    neither read nor written unless nothing was stored, when a missing run is told apart)."""
    if held and len(writes) <= _ROWS_PER_INSERT:
        written, checked = _held(blobs, held)
        if not written:
            # Values this process stored before: one INSERT (a transaction of its own) stores the
            # rows if the run exists and the store still holds each value. Nothing stored (a value
            # pruned meanwhile, the run gone, the writes stored before) is told apart below.
            before = conn.total_changes
            _insert_writes(conn, run_id, writes, now, checked)
            if conn.total_changes != before:
                return
    with _Transaction(conn):
        if blobs:
            _insert_blobs(conn, blobs, now)
        before = conn.total_changes
        _insert_writes(conn, run_id, writes, now)
        if conn.total_changes == before and _get_run(conn, run_id) is None:
            raise RunNotFound(run_id, url)


# A LangGraph step's checkpoint as its saver builds the row: the columns such a row fills (the
# others keep their defaults, as the general INSERT writes them), then the run row's head moved
# on by a conditional UPDATE of the two columns that change.
STEP_COLUMNS = (
    "run_id, seq, created_at, checkpoint_id, step, node_id, status, changes, snapshot, "
    "parent_checkpoint_id, node_output, duration, extra"
)
_INSERT_STEP = f"INSERT INTO checkpoints ({STEP_COLUMNS}, queue) VALUES ({', '.join('?' * 13)}, '[]')"
_STEP_RUN = [f"UPDATE runs SET head_seq = ?, updated_at = ? WHERE run_id = ? AND {_SEEN}"]


def _put_step(
    conn: sqlite3.Connection, seen: RunRecord, row: tuple[Any, ...], blobs: list[Blob], now: float, held: Container[str]
) -> RunRecord | None:
    """Write a step's checkpoint (``row``: its STEP_COLUMNS after run_id, seq and created_at) as the
    next of the run whose row is ``seen``, with its values; return the run row after, or None
    (nothing written) when the row is not ``seen`` any more or a value stored before is gone."""
    written, checked = _held(blobs, held)
    try:
        sql = _STEP_RUN[len(checked)]
    except IndexError:
        while len(_STEP_RUN) <= len(checked):
            _STEP_RUN.append(_STEP_RUN[0] + rows.blobs_held(len(_STEP_RUN), "?"))
        sql = _STEP_RUN[len(checked)]
    run_id, seq = seen.run_id, seen.head_seq + 1
    with _Transaction(conn):
        update = (seq, now, run_id, *rows.seen_values(seen), *checked)
        if not _execute(conn, sql, update).rowcount:
            return None
        if written:
            _insert_blobs(conn, written, now)
        _execute(conn, _INSERT_STEP, (run_id, seq, now, *row))
    return evolve(seen, head_seq=seq, updated_at=now)


# By the number of rows and of values whose addresses are checked.
_INSERT_WRITES: dict[tuple[int, int], str] = {}


def _insert_writes(
    conn: sqlite3.Connection, run_id: str, writes: list[WriteRow], now: float, checked: list[str] | None = None
) -> None:
    """Insert pending writes (if ``checked``, at most one statement's: stored only if the store
    holds the values at those addresses)."""
    held = len(checked) if checked else 0
    for start in range(0, len(writes), _ROWS_PER_INSERT):
        chunk = writes[start : start + _ROWS_PER_INSERT]
        sql = _INSERT_WRITES.get((len(chunk), held))
        if sql is None:
            sql = _INSERT_WRITES[len(chunk), held] = rows.insert_writes(len(chunk), "?", held)
        values: list[Any] = [run_id, now]
        for write in chunk:
            values += write
        values.append(run_id)
        if checked:
            values += checked
        conn.execute(sql, values)


def _write_rest(
    conn: sqlite3.Connection, run: RunRecord, commit: Commit, now: float, blobs: list[Blob]
) -> rows.Written:
    if commit.release_interrupts:
        conn.execute("DELETE FROM pending_interrupts WHERE run_id = ?", (run.run_id,))
    checkpoints = _write_children(conn, run, commit, blobs, now)
    if commit.open_interrupts:
        conn.executemany(_INSERT_INTERRUPT, [rows.interrupt_values(p) for p in commit.open_interrupts])
    if commit.idempotent:
        conn.executemany(
            "INSERT OR IGNORE INTO idempotency (run_id, key, hash, created_at) VALUES (?, ?, ?, ?)",
            [(run.run_id, key, value_hash, now) for key, value_hash in commit.idempotent],
        )
    if commit.writes:
        _insert_writes(conn, run.run_id, commit.writes, now)
    return checkpoints


# Writes of a value file before giving up on a folder where files keep disappearing.
FILE_ATTEMPTS = 3
# A temporary value file this old belongs to a write that died (a write takes seconds).
STALE_WRITE_SECONDS = 3600.0


def _delete_unreferenced(conn: sqlite3.Connection, paths: list[str], stale_before: float) -> None:
    # Under the write lock: a commit checks its files under it too, so a file deleted here was
    # either unreferenced for good or is written again by the commit that wanted it.
    with _Transaction(conn):
        for path in paths:
            name = os.path.basename(path)
            if name.startswith("."):
                if BlobFolder.older_than(Path(path), stale_before):
                    Path(path).unlink(missing_ok=True)  # a write interrupted long ago
            elif conn.execute("SELECT 1 FROM blobs WHERE hash = ?", (name,)).fetchone() is None:
                Path(path).unlink(missing_ok=True)


_PRUNABLE = (RunStatus.COMPLETED.value, RunStatus.FAILED.value)

# Blobs still reachable from anything kept: manifests, node outputs, run inputs,
# @idempotent results, pending writes, and blobs a front end lists under extra.blobs.
_REFERENCED_BLOBS = """
    SELECT j.value FROM checkpoints AS c, json_each(c.changes) AS j WHERE j.value IS NOT NULL
    UNION SELECT j.value FROM checkpoints AS c, json_each(c.snapshot, '$.manifest') AS j
        WHERE c.snapshot IS NOT NULL
    UNION SELECT j.value FROM checkpoints AS c, json_each(c.node_output) AS j
        WHERE c.node_output IS NOT NULL
    UNION SELECT j.value FROM checkpoints AS c, json_each(c.extra, '$.blobs') AS j
    UNION SELECT j.value FROM runs AS r, json_each(r.input_manifest) AS j
    UNION SELECT hash FROM idempotency
    UNION SELECT value_hash FROM pending_writes
"""
_LIVE_BLOBS = live_blobs(_REFERENCED_BLOBS, "json_each(b.parts)")


def _prune(conn: sqlite3.Connection, older_than: float) -> PruneReport:
    from ..model import PruneReport

    with _Transaction(conn):
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS prunable (run_id TEXT PRIMARY KEY)")
        conn.execute("DELETE FROM prunable")
        conn.execute(
            "INSERT INTO prunable SELECT run_id FROM runs WHERE status IN (?, ?) AND updated_at < ?",
            (*_PRUNABLE, older_than),
        )
        # Keep what resume and fork still need: each run's resume point and tombstone,
        # gate checkpoints, and checkpoints other runs were forked from.
        doomed = """
            run_id IN (SELECT run_id FROM prunable)
              AND created_at < ?
              AND status != 'interrupted'
              AND checkpoint_id NOT IN (
                  SELECT parent_checkpoint_id FROM runs WHERE parent_checkpoint_id IS NOT NULL)
              AND seq < (SELECT MAX(k.seq) FROM checkpoints AS k
                         WHERE k.run_id = checkpoints.run_id AND k.step != 'run_end')
        """
        keep_rebuildable(
            conn.execute(f"SELECT run_id, seq FROM checkpoints WHERE {doomed}", (older_than,)).fetchall(),
            lambda run_id: conn.execute(
                "SELECT seq, snapshot IS NOT NULL FROM checkpoints WHERE run_id = ? ORDER BY seq", (run_id,)
            ).fetchall(),
            partial(_state_at, conn),
            lambda run_id, seq, state: conn.execute(
                "UPDATE checkpoints SET snapshot = ? WHERE run_id = ? AND seq = ?",
                (rows.snapshot_json(state), run_id, seq),
            ),
        )
        checkpoints = conn.execute(f"DELETE FROM checkpoints WHERE {doomed}", (older_than,)).rowcount
        events = conn.execute(
            "DELETE FROM events WHERE run_id IN (SELECT run_id FROM prunable) AND at < ?",
            (older_than,),
        ).rowcount
        idempotency = conn.execute(
            "DELETE FROM idempotency WHERE run_id IN (SELECT run_id FROM prunable) AND created_at < ?",
            (older_than,),
        ).rowcount
        idempotency += conn.execute(
            "DELETE FROM pending_writes WHERE run_id IN (SELECT run_id FROM prunable) AND created_at < ?",
            (older_than,),
        ).rowcount
        freed = conn.execute(
            f"SELECT COUNT(*), COALESCE(SUM(size), 0) FROM blobs WHERE hash NOT IN ({_LIVE_BLOBS})"
        ).fetchone()
        conn.execute(f"DELETE FROM blobs WHERE hash NOT IN ({_LIVE_BLOBS})")
        conn.execute("DELETE FROM prunable")
    return PruneReport(checkpoints, events, idempotency, int(freed[0]), int(freed[1]))
