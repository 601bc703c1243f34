"""The SQLite schema: ordered migrations recorded in ``schema_version``."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from ..errors import SchemaMismatch, StoreUnavailable
from .ddl import SCHEMA_VERSION, current_schema

if TYPE_CHECKING:
    from .migrations import Step

__all__ = ["SCHEMA_VERSION", "check_schema", "ensure_schema"]

_OUR_TABLES = {"runs", "checkpoints", "pending_interrupts", "idempotency", "blobs", "events", "pending_writes"}


def _current_version(conn: sqlite3.Connection, where: str) -> int:
    # One read for a store that exists (every open asks); only a new or foreign file, which has
    # no schema_version, is looked at further.
    try:
        row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    except sqlite3.OperationalError as error:
        if "no such table" not in str(error):
            raise
        return _unversioned(conn, where)
    return int(row[0] or 0)


def _unversioned(conn: sqlite3.Connection, where: str) -> int:
    """Return 0 for a new database; refuse one that holds tables of someone else's."""
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "schema_version" in tables:
        # Another process created the store between this read and the one before it: read its version.
        return _current_version(conn, where)
    if tables - {"sqlite_sequence"}:
        raise StoreUnavailable(
            f"{where} is a SQLite database that durable_nb did not create (it has tables "
            f"{sorted(tables)[:5]}). Point durable_nb at a new file instead."
        )
    return 0


def check_schema(conn: sqlite3.Connection, where: str) -> int:
    """Return the store's schema version; refuse foreign databases and newer schemas."""
    version = _current_version(conn, where)
    if version > SCHEMA_VERSION:
        raise _newer(where, version)
    return version


def ensure_schema(conn: sqlite3.Connection, where: str, version: int | None = None) -> int:
    """Create or migrate the schema in one IMMEDIATE transaction; refuse newer schemas.

    ``version`` is what ``check_schema`` just read on this connection, if it did.
    """
    if version is None:
        version = check_schema(conn, where)
    if version == SCHEMA_VERSION:
        return version
    if version > SCHEMA_VERSION:
        raise _newer(where, version)
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Re-read under the write lock: another process may have migrated meanwhile.
        version = _current_version(conn, where)
        if version > SCHEMA_VERSION:
            raise _newer(where, version)
        # Imported here: opening a store that is up to date (most opens) neither creates nor migrates.
        from .migrations import create_schema, run_migrations

        if version == 0:
            conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)")
            schema = current_schema(real="REAL", blob="BLOB", bigint="INTEGER", options=" WITHOUT ROWID")
            create_schema(conn.execute, schema, SCHEMA_VERSION, "?")
        else:
            run_migrations(conn.execute, migrations(), version, "?")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return SCHEMA_VERSION


def migrations() -> list[Step]:
    """The SQLite store's migration steps in order (index i takes version i to i + 1)."""
    from .migrations import migrations as steps

    return steps(
        real="REAL",
        blob="BLOB",
        bigint="INTEGER",
        snapshot_json="json_object('manifest', json(manifest), 'completed', json(completed))",
        table_options=" WITHOUT ROWID",
    )


def _newer(where: str, version: int) -> SchemaMismatch:
    from .migrations import newer_schema

    return newer_schema(where, version, SCHEMA_VERSION)
