"""The SQLite schema: ordered migrations recorded in ``schema_version``."""

from __future__ import annotations

import sqlite3
import time

from ..errors import SchemaMismatch, StoreUnavailable

__all__ = ["SCHEMA_VERSION", "check_schema", "ensure_schema"]

_V1 = """
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    input_manifest TEXT NOT NULL,
    error TEXT,
    error_type TEXT,
    idempotency_key TEXT,
    parent_run_id TEXT,
    parent_checkpoint_id TEXT,
    owner TEXT,
    lease_until REAL,
    head_seq INTEGER NOT NULL DEFAULT 0,
    event_seq INTEGER NOT NULL DEFAULT 0,
    meta TEXT NOT NULL DEFAULT '{}'
);
CREATE UNIQUE INDEX runs_by_idempotency_key ON runs (name, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX runs_by_name ON runs (name, run_id);
CREATE INDEX runs_by_status ON runs (status);
CREATE INDEX runs_by_parent ON runs (parent_run_id);

CREATE TABLE checkpoints (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    checkpoint_id TEXT NOT NULL UNIQUE,
    created_at REAL NOT NULL,
    step TEXT NOT NULL,
    node_id TEXT,
    status TEXT NOT NULL,
    manifest TEXT NOT NULL,
    completed TEXT NOT NULL,
    queue TEXT NOT NULL,
    skipped TEXT NOT NULL DEFAULT '[]',
    routes TEXT NOT NULL DEFAULT '{}',
    iteration INTEGER,
    item_index INTEGER,
    branch_key TEXT,
    parent_checkpoint_id TEXT,
    node_input TEXT,
    node_output TEXT,
    error TEXT,
    error_type TEXT,
    traceback TEXT,
    interrupt TEXT,
    decision TEXT,
    resumes TEXT NOT NULL DEFAULT '{}',
    counters TEXT NOT NULL DEFAULT '{}',
    agent_path TEXT,
    duration REAL,
    attempts INTEGER,
    extra TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (run_id, seq)
);
CREATE INDEX checkpoints_by_node ON checkpoints (run_id, node_id, seq);

CREATE TABLE pending_interrupts (
    run_id TEXT NOT NULL,
    node_id TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    reason TEXT NOT NULL,
    context TEXT NOT NULL,
    agent_path TEXT,
    created_at REAL NOT NULL,
    expires_at REAL,
    on_timeout TEXT,
    PRIMARY KEY (run_id, node_id)
);
CREATE INDEX pending_by_expiry ON pending_interrupts (expires_at)
    WHERE expires_at IS NOT NULL;

CREATE TABLE idempotency (
    run_id TEXT NOT NULL,
    key TEXT NOT NULL,
    hash TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (run_id, key)
);

CREATE TABLE blobs (
    hash TEXT PRIMARY KEY,
    codec TEXT NOT NULL,
    size INTEGER NOT NULL,
    created_at REAL NOT NULL,
    data BLOB NOT NULL
);

CREATE TABLE events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    node_id TEXT,
    at REAL NOT NULL,
    data TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (run_id, seq)
);
"""

# Index i holds the script that takes a store from version i to i + 1.
_MIGRATIONS: list[str] = [_V1]
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
