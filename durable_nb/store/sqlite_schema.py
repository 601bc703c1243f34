"""The SQLite schema: ordered migrations recorded in ``schema_version``."""

from __future__ import annotations

import sqlite3
import time

from ..errors import SchemaMismatch, StoreUnavailable
from .ddl import BLOB_PARTS_V2, schema_v1, state_changes_v3

__all__ = ["SCHEMA_VERSION", "check_schema", "ensure_schema"]

_V1 = schema_v1(real="REAL", blob="BLOB", bigint="INTEGER")

# Index i holds the script that takes a store from version i to i + 1.
_MIGRATIONS: list[str] = [
    _V1,
    BLOB_PARTS_V2,
    state_changes_v3("json_object('manifest', json(manifest), 'completed', json(completed))"),
]
SCHEMA_VERSION = len(_MIGRATIONS)
_OUR_TABLES = {"runs", "checkpoints", "pending_interrupts", "idempotency", "blobs", "events"}


def _current_version(conn: sqlite3.Connection, where: str) -> int:
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "schema_version" not in tables:
        if tables - {"sqlite_sequence"}:
            raise StoreUnavailable(
                f"{where} is a SQLite database that durable_nb did not create (it has tables "
                f"{sorted(tables)[:5]}). Point durable_nb at a new file instead."
            )
        return 0
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return int(row[0] or 0)


def check_schema(conn: sqlite3.Connection, where: str) -> int:
    """Return the store's schema version; refuse foreign databases and newer schemas."""
    version = _current_version(conn, where)
    if version > SCHEMA_VERSION:
        raise _newer(where, version)
    return version


def ensure_schema(conn: sqlite3.Connection, where: str) -> int:
    """Create or migrate the schema in one IMMEDIATE transaction; refuse newer schemas."""
    version = _current_version(conn, where)
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
        if version == 0:
            conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)")
        for target in range(version, SCHEMA_VERSION):
            for statement in _MIGRATIONS[target].split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute("INSERT INTO schema_version VALUES (?, ?)", (target + 1, time.time()))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return SCHEMA_VERSION


def _newer(where: str, version: int) -> SchemaMismatch:
    return SchemaMismatch(
        f"The store {where} has schema version {version}, newer than the {SCHEMA_VERSION} "
        "this durable_nb knows. Upgrade durable_nb (pip install -U durable-nb) to open it; "
        "the store was left unchanged."
    )
