"""What a LangGraph saver needs of the store beyond its protocol, for both SQL backends.

Pending writes are rows of the idempotency table (run, key -> value address), so the store's
garbage collection keeps their values alive and its prune treats them like any other stored
result; reading one checkpoint's writes and deleting checkpoints or whole threads need SQL the
protocol does not offer. Each function takes a connection and runs whole through the store's
own ``_run`` (its lock on SQLite, a pooled connection on PostgreSQL), in one transaction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInput
from ..model import CheckpointState
from ..store import rows
from ..store.protocol import Store
from ..store.state import keep_rebuildable

__all__ = [
    "Dialect",
    "WRITE_KEYS",
    "delete_runs",
    "dialect_of",
    "forget_checkpoints",
    "forget_for_runs",
    "write_prefix",
    "writes_of",
]

# Every pending write's key starts so; a checkpoint's keys start with ``write_prefix(id)``.
WRITE_KEYS = "lgw:"


@dataclass(frozen=True, slots=True)
class Dialect:
    """How one backend spells what differs: placeholders, JSON paths and transactions."""

    p: str
    # The LangGraph run id in a checkpoint's metadata (``c`` is the checkpoints row).
    metadata_run_id: str
    sqlite: bool


_SQLITE = Dialect("?", "json_extract(c.extra, '$.langgraph.metadata.run_id')", True)
_POSTGRES = Dialect("%s", "(c.extra::json #>> '{langgraph,metadata,run_id}')", False)


def dialect_of(store: Store) -> Dialect:
    """Return the SQL dialect of a durable_nb store; refuse stores that are not SQL."""
    url = getattr(store, "url", "")
    if not hasattr(store, "_run") or not hasattr(store, "_sql"):
        raise InvalidInput(
            f"DurableSaver needs a SQLite or PostgreSQL store from durable_nb.connect(), not {type(store).__name__}."
        )
    return _SQLITE if url.startswith("sqlite") else _POSTGRES


@contextmanager
def _transaction(conn: Any, d: Dialect) -> Iterator[None]:
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


def writes_of(conn: Any, d: Dialect, run_id: str, prefix: str) -> list[tuple[str, str]]:
    """Return (key, value address) of a run's pending writes whose key starts with ``prefix``."""
    sql = f"SELECT key, hash FROM idempotency WHERE run_id = {d.p} AND substr(key, 1, CAST({d.p} AS INTEGER)) = {d.p}"
    return [(str(k), str(h)) for k, h in conn.execute(sql, (run_id, len(prefix), prefix)).fetchall()]


def _in(d: Dialect, items: list[Any]) -> str:
    return f"({', '.join([d.p] * len(items))})"


def _delete_rows(conn: Any, d: Dialect, run_ids: list[str]) -> None:
    for table in ("checkpoints", "events", "idempotency", "pending_interrupts", "runs"):
        conn.execute(f"DELETE FROM {table} WHERE run_id IN {_in(d, run_ids)}", run_ids)


def delete_runs(conn: Any, d: Dialect, run_ids: list[str]) -> None:
    """Delete runs with everything they hold (their values stay until garbage collection)."""
    if run_ids:
        with _transaction(conn, d):
            _delete_rows(conn, d, run_ids)


StateAt = Callable[[Any, str, int], CheckpointState]


def forget_checkpoints(conn: Any, d: Dialect, state_at: StateAt, doomed: dict[str, list[tuple[int, str]]]) -> None:
    """Delete checkpoints (run -> [(seq, write key prefix)]) with their pending writes, in one transaction.

    A kept checkpoint whose state was rebuilt from a deleted one gets the whole state first; a
    run left with no checkpoint is deleted. The run's head moves on, so that a saver elsewhere
    that remembers the state at a deleted head finds its next commit refused and reads again.
    """
    if doomed:
        with _transaction(conn, d):
            _forget(conn, d, state_at, doomed)


def forget_for_runs(conn: Any, d: Dialect, state_at: StateAt, run_ids: list[str]) -> list[str]:
    """Delete every checkpoint whose metadata names one of the LangGraph ``run_ids``; return the runs touched."""
    if not run_ids:
        return []
    with _transaction(conn, d):
        found = conn.execute(
            f"SELECT c.run_id, c.seq, c.extra FROM checkpoints AS c WHERE {d.metadata_run_id} IN {_in(d, run_ids)}",
            run_ids,
        ).fetchall()
        doomed: dict[str, list[tuple[int, str]]] = {}
        for run_id, seq, extra in found:
            doomed.setdefault(str(run_id), []).append((int(seq), write_prefix(json.loads(extra)["langgraph"]["id"])))
        _forget(conn, d, state_at, doomed)
    return list(doomed)


def _forget(conn: Any, d: Dialect, state_at: StateAt, doomed: dict[str, list[tuple[int, str]]]) -> None:
    p = d.p
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
        for seq, prefix in items:
            conn.execute(f"DELETE FROM checkpoints WHERE run_id = {p} AND seq = {p}", (run_id, seq))
            conn.execute(
                f"DELETE FROM idempotency WHERE run_id = {p} AND substr(key, 1, CAST({p} AS INTEGER)) = {p}",
                (run_id, len(prefix), prefix),
            )
        conn.execute(f"UPDATE runs SET head_seq = head_seq + 1 WHERE run_id = {p}", (run_id,))
        if conn.execute(f"SELECT 1 FROM checkpoints WHERE run_id = {p} LIMIT 1", (run_id,)).fetchone() is None:
            emptied.append(run_id)
    if emptied:
        _delete_rows(conn, d, emptied)


def write_prefix(checkpoint_id: str) -> str:
    """Return the key prefix of one checkpoint's pending writes (its id's length keeps ids apart)."""
    return f"{WRITE_KEYS}{len(checkpoint_id)}:{checkpoint_id}:"
