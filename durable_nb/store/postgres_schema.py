"""The PostgreSQL schema: the same tables as SQLite, ordered migrations in ``schema_version``."""

from __future__ import annotations

import time
from typing import Any

from ..errors import SchemaMismatch, StoreUnavailable

__all__ = ["SCHEMA_VERSION", "ensure_schema"]

_V1 = """
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    input_manifest TEXT NOT NULL,
    error TEXT,
    error_type TEXT,
    idempotency_key TEXT,
    parent_run_id TEXT,
    parent_checkpoint_id TEXT,
    owner TEXT,
    lease_until DOUBLE PRECISION,
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
    created_at DOUBLE PRECISION NOT NULL,
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
    duration DOUBLE PRECISION,
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
    created_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION,
    on_timeout TEXT,
    PRIMARY KEY (run_id, node_id)
);
CREATE INDEX pending_by_expiry ON pending_interrupts (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE idempotency (
    run_id TEXT NOT NULL,
    key TEXT NOT NULL,
    hash TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (run_id, key)
);

CREATE TABLE blobs (
    hash TEXT PRIMARY KEY,
    codec TEXT NOT NULL,
    size BIGINT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    data BYTEA NOT NULL
);

CREATE TABLE events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    node_id TEXT,
    at DOUBLE PRECISION NOT NULL,
    data TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (run_id, seq)
);
"""

# Index i holds the script that takes a store from version i to i + 1.
_MIGRATIONS: list[str] = [_V1]
SCHEMA_VERSION = len(_MIGRATIONS)
_OUR_TABLES = {"runs", "checkpoints", "pending_interrupts", "idempotency", "blobs", "events"}
# Any fixed number works: it only has to be the same for every durable_nb process.
_MIGRATION_LOCK = 0x64757261626C65


def _tables(conn: Any) -> set[str]:
    rows = conn.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")
    return {row[0] for row in rows}


def _version(conn: Any, where: str) -> int:
    tables = _tables(conn)
    if "schema_version" not in tables:
        if tables & _OUR_TABLES:
            raise StoreUnavailable(
                f"{where} has tables named like durable_nb's but no schema_version; it was not created "
                "by durable_nb. Use another schema (?schema=name in the URL) or database."
            )
        return 0
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return int(row[0] or 0)


def ensure_schema(conn: Any, where: str) -> int:
    """Create or migrate the schema under an advisory lock; refuse a newer schema unchanged."""
    version = _version(conn, where)
    if version == SCHEMA_VERSION:
        return version
    if version > SCHEMA_VERSION:
        raise _newer(where, version)
    with conn.transaction():
        # Serialize migrators across processes and machines; re-read under the lock.
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        version = _version(conn, where)
        if version > SCHEMA_VERSION:
            raise _newer(where, version)
        if version == 0:
            conn.execute(
                "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
            )
        for target in range(version, SCHEMA_VERSION):
            for statement in _MIGRATIONS[target].split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute("INSERT INTO schema_version VALUES (%s, %s)", (target + 1, time.time()))
    return SCHEMA_VERSION


def _newer(where: str, version: int) -> SchemaMismatch:
    return SchemaMismatch(
        f"The store {where} has schema version {version}, newer than the {SCHEMA_VERSION} this "
        "durable_nb knows. Upgrade durable_nb (pip install -U durable-nb) to open it; the store "
        "was left unchanged."
    )
