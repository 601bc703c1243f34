"""The schema's ordered migrations, written once for both SQL backends.

Each backend finds its store's version and takes its own lock (SQLite's write lock, a
PostgreSQL advisory lock); the steps, the order they run in and the refusal of a newer
schema are the same. A step is SQL, or a function of ``(execute, placeholder)`` when it needs
Python (the secret key) to compute what it writes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..errors import SchemaMismatch, TamperedValueError
from ..model import Blob
from . import codec
from .ddl import (
    BLOB_PARTS_V2,
    BLOB_SEALS_V4,
    CHECKPOINTS_BY_TIME_V5,
    events_v8,
    pending_writes_v7,
    schedules_v6,
    schema_v1,
    state_changes_v3,
)
from .secret import ENV_SECRET, key_file_path, load_secret

__all__ = [
    "Step",
    "create_schema",
    "key_events_by_their_key",
    "migrations",
    "move_pending_writes",
    "newer_schema",
    "run_migrations",
    "seal_unsigned_values",
]

Step = str | Callable[[Callable[..., Any], str], None]

# Rows sealed per UPDATE: three parameters each, under SQLite's oldest limit of 999.
_SEAL_BATCH = 300
# How many of the store's newest small signed values the key is checked against before sealing.
_KEY_CHECKS = 8
_KEY_CHECK_BYTES = 1 << 20


def migrations(*, real: str, blob: str, bigint: str, snapshot_json: str, table_options: str = "") -> list[Step]:
    """Return the steps in order: index i takes a store from version i to i + 1.

    ``table_options`` ends the CREATE TABLE of tables keyed by their primary key only.
    """
    return [
        schema_v1(real=real, blob=blob, bigint=bigint),
        BLOB_PARTS_V2,
        state_changes_v3(snapshot_json),
        seal_unsigned_values,
        CHECKPOINTS_BY_TIME_V5,
        schedules_v6(real),
        move_pending_writes(pending_writes_v7(real, bigint, table_options)),
        # PostgreSQL has no rowid: its version 8 changes nothing.
        key_events_by_their_key(events_v8(real, table_options)) if table_options else "",
    ]


def seal_unsigned_values(execute: Callable[..., Any], placeholder: str) -> None:
    """Version 4: give every value stored under an unsigned address (JSON, lists) its seal under the key.

    Those addresses are SHA-256 digests anyone can compute: from now on such a value loads only
    with its seal, so one added to the store later, without the key, is refused. The values the
    store holds at the upgrade are the ones its processes wrote; sealing them keeps them loading.
    """
    execute(BLOB_SEALS_V4)
    p = placeholder
    found = execute(f"SELECT hash FROM blobs WHERE {_addressed(codec.UNSIGNED_PREFIXES)}").fetchall()
    addresses = [row[0] for row in found]
    if not addresses:
        return  # a new or JSON-free store: no key is needed (nor created) to open it
    key = load_secret()
    _check_key(execute, key)
    for start in range(0, len(addresses), _SEAL_BATCH):
        batch = addresses[start : start + _SEAL_BATCH]
        params: list[str] = []
        for address in batch:
            params += [address, codec.seal(address, key)]
        execute(
            f"UPDATE blobs SET seal = CASE hash {' '.join([f'WHEN {p} THEN {p}'] * len(batch))} END "
            f"WHERE hash IN ({', '.join([p] * len(batch))})",
            (*params, *batch),
        )


# Keys under which versions before 7 stored LangGraph's pending writes as signed JSON records:
# ``lgw:<length of the checkpoint id>:<checkpoint id>:`` then ``r:<task>:<idx>`` or, for special
# writes, ``s:<task>:<idx>:<time stored, ns>``.
_OLD_WRITES = "lgw:"
_PENDING_WRITE_COLUMNS = "run_id, checkpoint_id, task_id, idx, channel, task_path, value_hash, stamp, mac, created_at"
# Rows moved per INSERT: ten parameters each, under SQLite's oldest limit of 999.
_MOVE_BATCH = 90


def move_pending_writes(table: str) -> Step:
    """Return version 7: create the pending_writes table (``table``) and move into it the pending
    writes stored before as JSON records, each checked and signed under the key as a row."""

    def step(execute: Callable[..., Any], placeholder: str) -> None:
        for statement in table.split(";"):
            if statement.strip():
                execute(statement)
        found = execute(
            "SELECT i.run_id, i.key, i.created_at, b.hash, b.codec, b.data, b.seal FROM idempotency AS i "
            f"JOIN blobs AS b ON b.hash = i.hash WHERE substr(i.key, 1, {len(_OLD_WRITES)}) = '{_OLD_WRITES}'"
        ).fetchall()
        if not found:
            return  # no LangGraph writes: no key is needed (nor created) to open the store
        key = load_secret()
        latest: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        for run_id, old_key, created_at, address, kind, data, seal in found:
            row = _moved_write(key, run_id, old_key, created_at, Blob(address, kind, bytes(data), seal=seal))
            # Special writes stored again for one task: the latest replaces the earlier ones.
            if row[:4] not in latest or row[7] > latest[row[:4]][7]:
                latest[row[:4]] = row
        moved = list(latest.values())
        for start in range(0, len(moved), _MOVE_BATCH):
            batch = moved[start : start + _MOVE_BATCH]
            values = ", ".join([f"({', '.join([placeholder] * 10)})"] * len(batch))
            execute(
                f"INSERT INTO pending_writes ({_PENDING_WRITE_COLUMNS}) VALUES {values}",
                tuple(v for row in batch for v in row),
            )
        # The records moved are those read above: keyed LangGraph writes whose record is stored.
        execute(
            f"DELETE FROM idempotency WHERE substr(key, 1, {len(_OLD_WRITES)}) = '{_OLD_WRITES}' "
            "AND hash IN (SELECT hash FROM blobs)"
        )

    return step


def key_events_by_their_key(table: str) -> Step:
    """Return version 8 on SQLite: rebuild the events table as ``table`` creates it (keyed by its
    primary key only), every row copied in the one transaction."""

    def step(execute: Callable[..., Any], placeholder: str) -> None:
        # The old table is renamed first so that the new one is created under its own name with
        # the text a new store's has (renamed, it would be quoted). No view, trigger or foreign
        # key names the table for the rename to redirect.
        execute("ALTER TABLE events RENAME TO events_v7")
        execute(table)
        # By name, the old table's columns (the new table has the same, a test keeps the schemas
        # equal), in key order: each row is appended to the new key's b-tree.
        columns = ", ".join(row[1] for row in execute("PRAGMA table_xinfo(events_v7)").fetchall())
        execute(f"INSERT INTO events ({columns}) SELECT {columns} FROM events_v7 ORDER BY run_id, seq")
        execute("DROP TABLE events_v7")

    return step


def _moved_write(key: bytes, run_id: str, old_key: str, created_at: float, record: Blob) -> tuple[Any, ...]:
    """Return a pending write stored as a JSON record as a row of pending_writes, checked and signed."""
    try:
        task_id, channel, task_path, idx, value = codec.decode(record, key)
    except TamperedValueError:
        raise TamperedValueError(
            f"A LangGraph pending write of this store (run {run_id}) is signed with another secret key than "
            "this process's, or was modified, so the store was not upgraded and was left unchanged. Open "
            f"it with the key its processes use ({ENV_SECRET}, or the key file {key_file_path()})."
        ) from None
    size, _, rest = old_key[len(_OLD_WRITES) :].partition(":")
    checkpoint_id = rest[: int(size)]
    stamp = int(old_key.rsplit(":", 1)[1]) if rest[int(size) + 1 : int(size) + 2] == "s" else 0
    mac = codec.write_mac(key, checkpoint_id, task_id, idx, channel, task_path, value)
    return (run_id, checkpoint_id, task_id, idx, channel, task_path, value, stamp, mac, created_at)


def _addressed(prefixes: tuple[str, ...]) -> str:
    """Return the SQL condition that a blob's address has one of ``prefixes`` (constants, not input)."""
    return "(" + " OR ".join(f"substr(hash, 1, {len(prefix)}) = '{prefix}'" for prefix in prefixes) + ")"


def _check_key(execute: Callable[..., Any], key: bytes) -> None:
    """Refuse to seal with a key that signed none of the store's newest signed values.

    Its processes use another key: sealed with this one, their values would never load again.
    A store with no signed value has nothing to check against.
    """
    rows = execute(
        f"SELECT hash, codec, data FROM blobs WHERE {_addressed(codec.SIGNED_PREFIXES)} "
        f"AND length(data) > 0 AND size < {_KEY_CHECK_BYTES} ORDER BY created_at DESC LIMIT {_KEY_CHECKS}"
    ).fetchall()
    if rows and not any(codec.signed_with(Blob(address, kind, bytes(data)), key) for address, kind, data in rows):
        raise TamperedValueError(
            "This store holds values signed with another secret key than this process's, so it was not "
            "upgraded (the upgrade signs the store's JSON values with the key of the process that opens it "
            f"first) and was left unchanged. Open it with the key its processes use ({ENV_SECRET}, or the "
            f"key file {key_file_path()})."
        )


def run_migrations(execute: Callable[..., Any], steps: list[Step], version: int, placeholder: str) -> int:
    """Run the steps after ``version`` in the caller's transaction, recording each; return the new version."""
    for target in range(version, len(steps)):
        step = steps[target]
        if callable(step):
            step(execute, placeholder)
        else:
            for statement in step.split(";"):
                if statement.strip():
                    execute(statement)
        execute(f"INSERT INTO schema_version VALUES ({placeholder}, {placeholder})", (target + 1, time.time()))
    return len(steps)


def create_schema(execute: Callable[..., Any], schema: str, version: int, placeholder: str) -> int:
    """Create a new store's whole ``schema`` (at ``version``) in the caller's transaction, every version recorded.

    A new store holds nothing for the steps to carry over: it gets the tables as they end up.
    """
    for statement in schema.split(";"):
        if statement.strip():
            execute(statement)
    now = time.time()
    rows = ", ".join([f"({placeholder}, {placeholder})"] * version)
    execute(f"INSERT INTO schema_version VALUES {rows}", tuple(v for n in range(1, version + 1) for v in (n, now)))
    return version


def newer_schema(where: str, version: int, known: int) -> SchemaMismatch:
    """The error for a store written by a newer durable_nb: it is left unchanged."""
    return SchemaMismatch(
        f"The store {where} has schema version {version}, newer than the {known} this durable_nb "
        "knows. Upgrade durable_nb (pip install -U durable-nb) to open it; the store was left unchanged."
    )
