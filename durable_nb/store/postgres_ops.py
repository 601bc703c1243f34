"""The PostgreSQL store's operations: each is one function of a pooled connection, run whole
(one transaction at most) by ``PostgresStore``.

Writers lock the run row (``SELECT … FOR UPDATE``) before anything else, so commits of one
run are serialized while different runs commit in parallel; a gate is claimed with one
``DELETE … RETURNING``.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import replace
from functools import lru_cache, partial
from typing import Any

from ..errors import RunNotFound
from ..model import (
    Blob,
    CheckpointRecord,
    CheckpointState,
    Commit,
    CommitResult,
    EventRecord,
    NewRun,
    PendingInterrupt,
    PruneReport,
    RunRecord,
    StatusRows,
)
from . import rows
from .ddl import live_blobs
from .protocol import HISTORY_COLUMNS
from .rules import check_expectations, choose_claim, trusted_seen, updated_run, writes_only
from .state import keep_rebuildable, state_from_sql, states_from_sql

_INSERT_BLOB = (
    "INSERT INTO blobs (hash, codec, size, created_at, data, parts) VALUES (%s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (hash) DO NOTHING"
)
_INSERT_CHECKPOINT = (
    f"INSERT INTO checkpoints ({rows.CHECKPOINT_COLUMNS}) VALUES ({', '.join(['%s'] * rows.CHECKPOINT_COUNT)})"
)
_INSERT_EVENT = f"INSERT INTO events ({rows.EVENT_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s)"
_INSERT_INTERRUPT = f"INSERT INTO pending_interrupts ({rows.INTERRUPT_COLUMNS}) VALUES ({', '.join(['%s'] * 9)})"
_INSERT_WRITE = rows.INSERT_WRITE.format(p="%s")
_RUN_VALUES = ", ".join(["%s"] * 17)


def _get_run(conn: Any, run_id: str, lock: bool = False) -> RunRecord | None:
    suffix = " FOR UPDATE" if lock else ""
    row = conn.execute(f"SELECT {rows.RUN_COLUMNS} FROM runs WHERE run_id = %s{suffix}", (run_id,)).fetchone()
    return None if row is None else rows.run_from_row(row)


def _list_runs(conn: Any, name: str | None, statuses: list[str] | None) -> list[RunRecord]:
    conditions, params = [], []
    if name is not None:
        conditions.append("name = %s")
        params.append(name)
    if statuses is not None:
        conditions.append("status = ANY(%s)")
        params.append(statuses)
    where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
    cursor = conn.execute(f"SELECT {rows.RUN_COLUMNS} FROM runs {where} ORDER BY run_id DESC", params)
    return [rows.run_from_row(row) for row in cursor]


def _write_children(
    conn: Any, run: RunRecord, commit: Commit | NewRun, blobs: list[Blob], now: float
) -> list[CheckpointRecord]:
    with conn.cursor() as cursor:
        if blobs:
            cursor.executemany(_INSERT_BLOB, [rows.blob_values(b, now) for b in blobs])
        written = []
        values = []
        # A record per checkpoint, only for a caller that reads them back (a NewRun's are read).
        returned = getattr(commit, "return_checkpoints", True)
        for offset, draft in enumerate(commit.checkpoints, start=1):
            seq = run.head_seq + offset
            values.append(rows.checkpoint_values(run.run_id, seq, now, draft))
            if returned:
                written.append(rows.checkpoint_from_draft(run.run_id, seq, now, draft))
        if values:
            cursor.executemany(_INSERT_CHECKPOINT, values)
        if commit.events:
            cursor.executemany(
                _INSERT_EVENT,
                [
                    (run.run_id, run.event_seq + offset, e.type, e.node_id, now, rows.dumps(e.data))
                    for offset, e in enumerate(commit.events, start=1)
                ],
            )
    return written


def _create_run(conn: Any, new: NewRun, now: float) -> tuple[RunRecord, bool]:
    run = rows.run_from_new(new, now)
    with conn.transaction():
        # The unique index decides a race of equal keys: the loser inserts nothing.
        inserted = conn.execute(
            f"INSERT INTO runs ({rows.RUN_COLUMNS}) VALUES ({_RUN_VALUES}) "
            "ON CONFLICT (name, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING RETURNING run_id",
            rows.run_values(run),
        ).fetchone()
        if inserted is None:
            row = conn.execute(
                f"SELECT {rows.RUN_COLUMNS} FROM runs WHERE name = %s AND idempotency_key = %s",
                (new.name, new.idempotency_key),
            ).fetchone()
            return rows.run_from_row(row), False
        _write_children(conn, replace(run, head_seq=0, event_seq=0), new, new.blobs, now)
    return run, True


def _pending(conn: Any, run_id: str) -> list[PendingInterrupt]:
    cursor = conn.execute(
        f"SELECT {rows.INTERRUPT_COLUMNS} FROM pending_interrupts WHERE run_id = %s ORDER BY created_at", (run_id,)
    )
    return [rows.interrupt_from_row(row) for row in cursor]


# Indexed by whether the UPDATE sets the status (see rows.run_update).
_UPDATE_RUN = {True: rows.UPDATE_RUN.format(p="%s"), False: rows.UPDATE_RUN_SAME_STATUS.format(p="%s")}
_SEEN = rows.SEEN_CONDITION.format(p="%s", same="IS NOT DISTINCT FROM")
# The conditional UPDATE, failing (division by zero) when it matched no row: so that the
# transaction it opens can be sent whole, its COMMIT included, without waiting for its count.
_UPDATE_SEEN_RUN = {
    sets: f"WITH updated AS ({sql} AND {_SEEN} RETURNING 1) SELECT 1 / (SELECT count(*) FROM updated)"
    for sets, sql in _UPDATE_RUN.items()
}


class _Stale(Exception):
    """The run row moved on from what the committer saw: roll back and read it."""


def _commit(conn: Any, commit: Commit, now: float, url: str) -> CommitResult:
    from psycopg.errors import UniqueViolation

    seen = writes_only(commit)
    if seen is not None:
        return _commit_writes(conn, seen, commit, now, url)
    seen = trusted_seen(commit)
    if seen is not None:
        try:
            return _commit_seen(conn, seen, commit, now)
        except (_Stale, UniqueViolation):
            # Rolled back. A stale view numbers children that exist already; a real clash of
            # ids is raised again below.
            pass
    return _commit_read(conn, commit, now, url)


# A statement's rows, at most: PostgreSQL takes 65,535 parameters, a checkpoint has 30.
_STATEMENT_ROWS = 1_000


def _values(columns: int, count: int) -> str:
    """Return ``(%s, …), …``: the VALUES list of ``count`` rows of ``columns`` parameters."""
    row = f"({', '.join(['%s'] * columns)})"
    return ", ".join([row] * count)


def _blobs_part(count: int) -> str:
    """Return the WITH part inserting ``count`` values (those stored already are kept)."""
    return (
        "b AS (INSERT INTO blobs (hash, codec, size, created_at, data, parts) "
        f"VALUES {_values(6, count)} ON CONFLICT (hash) DO NOTHING)"
    )


def _numbered(sql: str) -> str:
    """Return ``sql`` with its ``%s`` placeholders numbered ($1, …), as a raw cursor sends them."""
    numbers = itertools.count(1)
    return re.sub("%s", lambda _: f"${next(numbers)}", sql)


@lru_cache(maxsize=64)
def _statement(sets: bool, blobs: int, checkpoints: int, events: int, idempotent: int) -> str:
    """Return the one statement of a running node's commit with these many rows, with numbered
    placeholders ($1, …): psycopg sends it as it is (no parsing of a long query on every call)."""
    parts = [f"updated AS ({_UPDATE_RUN[sets]} AND {_SEEN} RETURNING 1)"]
    if blobs:
        parts.append(_blobs_part(blobs))
    if checkpoints:
        columns = rows.CHECKPOINT_COLUMNS
        parts.append(f"c AS (INSERT INTO checkpoints ({columns}) VALUES {_values(rows.CHECKPOINT_COUNT, checkpoints)})")
    if events:
        parts.append(f"e AS (INSERT INTO events ({rows.EVENT_COLUMNS}) VALUES {_values(6, events)})")
    if idempotent:
        parts.append(
            "i AS (INSERT INTO idempotency (run_id, key, hash, created_at) "
            f"VALUES {_values(4, idempotent)} ON CONFLICT (run_id, key) DO NOTHING)"
        )
    sql = f"WITH {', '.join(parts)} SELECT 1 / (SELECT count(*) FROM updated)"
    return _numbered(sql)


def _one_statement(
    seen: RunRecord, commit: Commit, now: float, sets: bool, values: tuple[Any, ...]
) -> tuple[str, list[Any], list[CheckpointRecord]]:
    """Return a running node's commit as one statement (its own transaction: the connection is in
    autocommit), its parameters and the checkpoints it writes.

    The conditional UPDATE and the inserts are parts of one WITH; the statement fails (division by
    zero) when the UPDATE matched no row, and a failed statement writes nothing. One statement
    instead of a pipeline of six: a sixth of the client's work per commit.
    """
    run_id = seen.run_id
    params: list[Any] = [*values, *rows.seen_values(seen)]
    for blob in commit.blobs:
        params += rows.blob_values(blob, now)
    checkpoints: list[CheckpointRecord] = []
    for offset, draft in enumerate(commit.checkpoints, start=1):
        params += rows.checkpoint_values(run_id, seen.head_seq + offset, now, draft)
        if commit.return_checkpoints:
            checkpoints.append(rows.checkpoint_from_draft(run_id, seen.head_seq + offset, now, draft))
    for offset, event in enumerate(commit.events, start=1):
        params += (run_id, seen.event_seq + offset, event.type, event.node_id, now, rows.dumps(event.data))
    for key, value_hash in commit.idempotent:
        params += (run_id, key, value_hash, now)
    counts = (len(commit.blobs), len(commit.checkpoints), len(commit.events), len(commit.idempotent))
    return _statement(sets, *counts), params, checkpoints


def _write_one_statement(
    conn: Any, seen: RunRecord, commit: Commit, now: float, sets: bool, values: tuple[Any, ...]
) -> list[CheckpointRecord]:
    """Write a running node's commit as one statement; return the checkpoints it wrote."""
    from psycopg import RawCursor

    sql, params, checkpoints = _one_statement(seen, commit, now, sets, values)
    RawCursor(conn).execute(sql, params)
    return checkpoints


def _fits_one_statement(commit: Commit) -> bool:
    """Whether a commit is written by ``_one_statement``: no gate rows, and not too many rows."""
    if commit.release_interrupts or commit.open_interrupts:
        return False  # a gate's commit deletes and inserts one key: kept in order, in the pipeline
    if commit.writes:
        return False  # pending writes with a status change: stored in the pipeline
    counts = (len(commit.blobs), len(commit.checkpoints), len(commit.events), len(commit.idempotent))
    return max(counts) <= _STATEMENT_ROWS


def _commit_seen(conn: Any, seen: RunRecord, commit: Commit, now: float) -> CommitResult:
    # A running node's commit, in one round trip: the conditional UPDATE does the checks
    # (re-evaluated after any concurrent writer commits) and fails when it matches nothing, so
    # nothing is written. Usually one statement; else BEGIN, the UPDATE, the writes and COMMIT
    # in one pipeline, whose rest (COMMIT included) the server skips once the UPDATE failed.
    from psycopg import Error
    from psycopg.errors import DivisionByZero

    after = updated_run(seen, commit, now, len(commit.checkpoints), len(commit.events))
    sets, values = rows.run_update(seen, after)
    failed: Error | None = None
    if _fits_one_statement(commit):
        try:
            checkpoints = _write_one_statement(conn, seen, commit, now, sets, values)
        except DivisionByZero:
            raise _Stale from None
        return CommitResult(after, checkpoints)
    try:
        with conn.pipeline():
            # A statement's error can surface while later ones are queued: kept here, not raised
            # out of the pipeline's block (psycopg would log the pipeline's own abort as a warning).
            try:
                conn.execute("BEGIN")
                conn.execute(_UPDATE_SEEN_RUN[sets], values + rows.seen_values(seen))
                checkpoints = _write_rest(conn, seen, commit, now)
                conn.execute("COMMIT")
            except Error as error:
                failed = error
    except Error as error:
        failed = failed or error
    except BaseException:
        conn.rollback()
        raise
    if failed is not None:
        conn.rollback()  # the failed transaction, which the server holds open
        if isinstance(failed, DivisionByZero):
            raise _Stale from None
        raise failed
    return CommitResult(after, checkpoints)


@lru_cache(maxsize=64)
def _writes_statement(blobs: int, writes: int) -> str:
    """Return the one statement that stores pending writes with these many values and rows, with
    numbered placeholders ($1, …)."""
    parts = [f"r AS ({_KEEP_RUN})"]
    if blobs:
        parts.append(_blobs_part(blobs))
    parts.append(
        f"w AS (INSERT INTO pending_writes (run_id, {rows.WRITE_COLUMNS}, created_at) "
        f"VALUES {_values(10, writes)} {rows.WRITE_CONFLICT})"
    )
    sql = f"WITH {', '.join(parts)} SELECT 1 / (SELECT count(*) FROM r)"
    return _numbered(sql)


# Holds the run row against deletion until the commit (a delete_runs waits, then finds the
# writes); no such run, and the statement fails (division by zero), writing nothing.
_KEEP_RUN = "SELECT 1 FROM runs WHERE run_id = %s FOR KEY SHARE"


def _commit_writes(conn: Any, seen: RunRecord, commit: Commit, now: float, url: str) -> CommitResult:
    """Store pending writes alone, and their values, in one statement (its own transaction: the
    connection is in autocommit), while the run exists; the run row is neither read nor written."""
    from psycopg import RawCursor
    from psycopg.errors import DivisionByZero

    if max(len(commit.blobs), len(commit.writes)) > _STATEMENT_ROWS:
        return _commit_read(conn, commit, now, url)
    params: list[Any] = [seen.run_id]
    for blob in commit.blobs:
        params += rows.blob_values(blob, now)
    for write in commit.writes:
        params += (seen.run_id, *write, now)
    try:
        RawCursor(conn).execute(_writes_statement(len(commit.blobs), len(commit.writes)), params)
    except DivisionByZero:
        raise RunNotFound(seen.run_id, url) from None
    return CommitResult(seen, [])


def _insert_writes(cursor: Any, run_id: str, commit: Commit, now: float) -> None:
    cursor.executemany(_INSERT_WRITE, [rows.write_values(run_id, write, now) for write in commit.writes])


def _commit_read(conn: Any, commit: Commit, now: float, url: str) -> CommitResult:
    with conn.transaction():
        run = _get_run(conn, commit.run_id, True)
        if run is None:
            raise RunNotFound(commit.run_id, url)
        check_expectations(run, commit)
        claimed = None
        still_pending = 0
        if commit.claim is not None:
            pending = _pending(conn, run.run_id)
            target = choose_claim(run.run_id, commit.claim, pending, commit.claim_gate)
            row = conn.execute(
                f"DELETE FROM pending_interrupts WHERE run_id = %s AND node_id = %s RETURNING {rows.INTERRUPT_COLUMNS}",
                (run.run_id, target.node_id),
            ).fetchone()
            if row is None:
                choose_claim(run.run_id, target.node_id, [])  # raises AlreadyResumed
            claimed = rows.interrupt_from_row(row)
            still_pending = len(pending) - 1
        after = updated_run(run, commit, now, len(commit.checkpoints), len(commit.events), still_pending)
        # The checks are done: send every write in one pipeline instead of a round trip each.
        with conn.pipeline():
            checkpoints = _write_rest(conn, run, commit, now)
            sets, values = rows.run_update(run, after)
            conn.execute(_UPDATE_RUN[sets], values)
    return CommitResult(after, checkpoints, claimed)


def _write_rest(conn: Any, run: RunRecord, commit: Commit, now: float) -> list[CheckpointRecord]:
    if commit.release_interrupts:
        conn.execute("DELETE FROM pending_interrupts WHERE run_id = %s", (run.run_id,))
    checkpoints = _write_children(conn, run, commit, commit.blobs, now)
    with conn.cursor() as cursor:
        if commit.open_interrupts:
            cursor.executemany(_INSERT_INTERRUPT, [rows.interrupt_values(p) for p in commit.open_interrupts])
        if commit.idempotent:
            cursor.executemany(
                "INSERT INTO idempotency (run_id, key, hash, created_at) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (run_id, key) DO NOTHING",
                [(run.run_id, key, value_hash, now) for key, value_hash in commit.idempotent],
            )
        if commit.writes:
            _insert_writes(cursor, run.run_id, commit, now)
    return checkpoints


def _landed(conn: Any, commit: Commit) -> CommitResult | None:
    """After a lost connection: return the commit's result if it was written, else None."""
    if not commit.checkpoints:
        return None
    first = commit.checkpoints[0].checkpoint_id
    row = conn.execute("SELECT run_id FROM checkpoints WHERE checkpoint_id = %s", (first,)).fetchone()
    if row is None:
        return None
    run = _get_run(conn, commit.run_id, False)
    assert run is not None
    ids = [draft.checkpoint_id for draft in commit.checkpoints]
    cursor = conn.execute(
        f"SELECT {rows.CHECKPOINT_COLUMNS} FROM checkpoints WHERE checkpoint_id = ANY(%s) ORDER BY seq", (ids,)
    )
    return CommitResult(run, [rows.checkpoint_from_row(r) for r in cursor], None)


def _one_checkpoint(conn: Any, run_id: str, condition: str) -> CheckpointRecord | None:
    row = conn.execute(
        f"SELECT {rows.CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = %s {condition} ORDER BY seq DESC LIMIT 1",
        (run_id,),
    ).fetchone()
    return None if row is None else rows.checkpoint_from_row(row)


def _node_checkpoint(
    conn: Any, run_id: str, node_id: str, prefix: str, max_seq: int | None, agent_path: str | None
) -> CheckpointRecord | None:
    sql = (
        f"SELECT {rows.CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = %s AND node_id = %s AND seq <= %s "
        "AND left(step, %s) = %s"
    )
    params: list[Any] = [run_id, node_id, max_seq if max_seq is not None else 2**31 - 1, len(prefix), prefix]
    if agent_path is not None:
        sql += " AND (agent_path = %s OR left(agent_path, %s) = %s)"
        params += [agent_path, len(agent_path) + 6, agent_path + "/tool:"]
    row = conn.execute(sql + " ORDER BY seq DESC LIMIT 1", params).fetchone()
    return None if row is None else rows.checkpoint_from_row(row)


def _checkpoint_by_id(conn: Any, run_id: str, checkpoint_id: str) -> CheckpointRecord | None:
    row = conn.execute(
        f"SELECT {rows.CHECKPOINT_COLUMNS} FROM checkpoints WHERE checkpoint_id = %s AND run_id = %s",
        (checkpoint_id, run_id),
    ).fetchone()
    return None if row is None else rows.checkpoint_from_row(row)


def _states_at(conn: Any, run_id: str, seqs: list[int]) -> dict[int, CheckpointState]:
    return states_from_sql(
        lambda sql, params: conn.execute(sql, params).fetchall(), partial(_get_run, conn), "%s", run_id, seqs
    )


def _latest_states(conn: Any, run_ids: list[str]) -> dict[str, CheckpointState]:
    return {run_id: _state_at(conn, run_id, None) for run_id in run_ids}


def _status_rows(conn: Any, run_id: str) -> StatusRows:
    return rows.status_rows(
        lambda sql, params: conn.execute(sql, params).fetchall(), "%s", run_id, _state_at(conn, run_id, None)
    )


def _list_checkpoints(conn: Any, run_id: str) -> list[CheckpointRecord]:
    cursor = conn.execute(
        f"SELECT {rows.CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = %s ORDER BY seq", (run_id,)
    )
    return [rows.checkpoint_from_row(row) for row in cursor]


def _expired(conn: Any, now: float, run_id: str | None) -> list[PendingInterrupt]:
    sql = f"SELECT {rows.INTERRUPT_COLUMNS} FROM pending_interrupts WHERE expires_at IS NOT NULL AND expires_at <= %s"
    params: list[Any] = [now]
    if run_id is not None:
        sql += " AND run_id = %s"
        params.append(run_id)
    return [rows.interrupt_from_row(row) for row in conn.execute(sql + " ORDER BY expires_at", params)]


def _get_blobs(conn: Any, hashes: list[str], key: bytes | None) -> dict[str, Blob]:
    # psycopg hands over each value whole: the loader hashes it.
    cursor = conn.execute("SELECT hash, codec, data, seal FROM blobs WHERE hash = ANY(%s)", (hashes,))
    return {value_hash: Blob(value_hash, codec, bytes(data), seal=seal) for value_hash, codec, data, seal in cursor}


def _state_at(conn: Any, run_id: str, seq: int | None) -> CheckpointState:
    return state_from_sql(
        lambda sql, params: conn.execute(sql, params).fetchall(), partial(_get_run, conn), "%s", run_id, seq
    )


def _get_idempotent(conn: Any, run_id: str, key: str) -> str | None:
    row = conn.execute("SELECT hash FROM idempotency WHERE run_id = %s AND key = %s", (run_id, key)).fetchone()
    return None if row is None else row[0]


def _list_events(conn: Any, run_id: str, after_seq: int) -> list[EventRecord]:
    cursor = conn.execute(
        f"SELECT {rows.EVENT_COLUMNS} FROM events WHERE run_id = %s AND seq > %s ORDER BY seq", (run_id, after_seq)
    )
    return [rows.event_from_row(row) for row in cursor]


_BYTES_WRITTEN = rows.BYTES_WRITTEN.format(
    outputs="SELECT value FROM jsonb_each_text(c.node_output::jsonb)", parts="jsonb_array_elements_text(g.parts::jsonb)"
)


def _history_rows(conn: Any, run_id: str) -> list[tuple[Any, ...]]:
    return conn.execute(
        # An index lookup per value written (a join would scan every blob for every checkpoint).
        f"SELECT {HISTORY_COLUMNS}, {_BYTES_WRITTEN} FROM checkpoints AS c WHERE c.run_id = %s ORDER BY c.seq",
        (run_id,),
    ).fetchall()


def _fork_tree(conn: Any, run_id: str) -> list[tuple[RunRecord, dict[str, Any]]]:
    columns = ", ".join(f"runs.{c.strip()}" for c in rows.RUN_COLUMNS.split(","))
    return [rows.tree_row(row) for row in conn.execute(rows.FORK_TREE.format(p="%s", columns=columns), (run_id,))]


_PRUNABLE = "SELECT run_id FROM runs WHERE status IN ('completed', 'failed') AND updated_at < %(cutoff)s"
# Blobs still reachable from anything kept: the values checkpoints changed or hold in snapshots,
# node outputs, run inputs, @idempotent results, pending writes, and blobs a front end lists
# under extra.blobs.
_REFERENCED_BLOBS = """
    SELECT j.value FROM checkpoints AS c, jsonb_each_text(c.changes::jsonb) AS j WHERE j.value IS NOT NULL
    UNION SELECT j.value FROM checkpoints AS c, jsonb_each_text(c.snapshot::jsonb -> 'manifest') AS j
        WHERE c.snapshot IS NOT NULL
    UNION SELECT j.value FROM checkpoints AS c, jsonb_each_text(c.node_output::jsonb) AS j
        WHERE c.node_output IS NOT NULL
    UNION SELECT j.value FROM checkpoints AS c,
        jsonb_array_elements_text(COALESCE(c.extra::jsonb -> 'blobs', '[]'::jsonb)) AS j
    UNION SELECT j.value FROM runs AS r, jsonb_each_text(r.input_manifest::jsonb) AS j
    UNION SELECT hash FROM idempotency
    UNION SELECT value_hash FROM pending_writes
"""
_LIVE_BLOBS = live_blobs(_REFERENCED_BLOBS, "jsonb_array_elements_text(b.parts::jsonb)")


def _prune(conn: Any, older_than: float) -> PruneReport:
    params = {"cutoff": older_than}
    with conn.transaction():
        # Keep what resume and fork still need: each run's resume point and tombstone,
        # gate checkpoints, and checkpoints other runs were forked from.
        doomed = f"""
            c.run_id IN ({_PRUNABLE})
              AND c.created_at < %(cutoff)s
              AND c.status <> 'interrupted'
              AND c.checkpoint_id NOT IN (
                  SELECT parent_checkpoint_id FROM runs WHERE parent_checkpoint_id IS NOT NULL)
              AND c.seq < (SELECT MAX(k.seq) FROM checkpoints AS k WHERE k.run_id = c.run_id AND k.step <> 'run_end')
        """
        keep_rebuildable(
            conn.execute(f"SELECT c.run_id, c.seq FROM checkpoints AS c WHERE {doomed}", params).fetchall(),
            lambda run_id: conn.execute(
                "SELECT seq, snapshot IS NOT NULL FROM checkpoints WHERE run_id = %s ORDER BY seq", (run_id,)
            ).fetchall(),
            partial(_state_at, conn),
            lambda run_id, seq, state: conn.execute(
                "UPDATE checkpoints SET snapshot = %s WHERE run_id = %s AND seq = %s",
                (rows.snapshot_json(state), run_id, seq),
            ),
        )
        checkpoints = conn.execute(f"DELETE FROM checkpoints AS c WHERE {doomed}", params).rowcount
        events = conn.execute(f"DELETE FROM events WHERE run_id IN ({_PRUNABLE}) AND at < %(cutoff)s", params).rowcount
        idempotency = conn.execute(
            f"DELETE FROM idempotency WHERE run_id IN ({_PRUNABLE}) AND created_at < %(cutoff)s", params
        ).rowcount
        idempotency += conn.execute(
            f"DELETE FROM pending_writes WHERE run_id IN ({_PRUNABLE}) AND created_at < %(cutoff)s", params
        ).rowcount
        freed = conn.execute(f"DELETE FROM blobs WHERE hash NOT IN ({_LIVE_BLOBS}) RETURNING size").fetchall()
    return PruneReport(checkpoints, events, idempotency, len(freed), sum(int(r[0]) for r in freed))
