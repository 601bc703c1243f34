"""The PostgreSQL schema: the same tables as SQLite, ordered migrations in ``schema_version``."""

from __future__ import annotations

import time
from typing import Any

from ..errors import SchemaMismatch, StoreUnavailable
from .ddl import BLOB_PARTS_V2, schema_v1, state_changes_v3

__all__ = ["MIGRATION_LOCK", "SCHEMA_VERSION", "ensure_schema"]

_V1 = schema_v1(real="DOUBLE PRECISION", blob="BYTEA", bigint="BIGINT")

# Index i holds the script that takes a store from version i to i + 1.
_MIGRATIONS: list[str] = [
    _V1,
    BLOB_PARTS_V2,
    state_changes_v3("json_build_object('manifest', manifest::json, 'completed', completed::json)::text"),
]
SCHEMA_VERSION = len(_MIGRATIONS)
_OUR_TABLES = {"runs", "checkpoints", "pending_interrupts", "idempotency", "blobs", "events"}
# Any fixed number works: it only has to be the same for every durable_nb process.
MIGRATION_LOCK = 0x64757261626C65


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
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
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
