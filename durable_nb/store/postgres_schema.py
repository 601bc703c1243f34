"""The PostgreSQL schema: the same tables as SQLite, ordered migrations in ``schema_version``."""

from __future__ import annotations

from typing import Any

from ..errors import SchemaMismatch, StoreUnavailable
from .ddl import current_schema
from .migrations import create_schema, migrations, newer_schema, run_migrations

__all__ = ["MIGRATION_LOCK", "SCHEMA_VERSION", "ensure_schema", "stored_version"]

_MIGRATIONS = migrations(
    real="DOUBLE PRECISION",
    blob="BYTEA",
    bigint="BIGINT",
    snapshot_json="json_build_object('manifest', manifest::json, 'completed', completed::json)::text",
)
SCHEMA_VERSION = len(_MIGRATIONS)
_CURRENT = current_schema(real="DOUBLE PRECISION", blob="BYTEA", bigint="BIGINT")
_OUR_TABLES = {"runs", "checkpoints", "pending_interrupts", "idempotency", "blobs", "events", "pending_writes"}
# Any fixed number works: it only has to be the same for every durable_nb process.
MIGRATION_LOCK = 0x64757261626C65


def _tables(conn: Any) -> set[str]:
    rows = conn.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")
    return {row[0] for row in rows}


def stored_version(conn: Any, where: str) -> int:
    """Return the schema version in the connection's current schema (0: none); refuse foreign tables."""
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
    version = stored_version(conn, where)
    if version == SCHEMA_VERSION:
        return version
    if version > SCHEMA_VERSION:
        raise _newer(where, version)
    with conn.transaction():
        # Serialize migrators across processes and machines; re-read under the lock.
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        version = stored_version(conn, where)
        if version > SCHEMA_VERSION:
            raise _newer(where, version)
        if version == 0:
            conn.execute(
                "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
            )
            create_schema(conn.execute, _CURRENT, SCHEMA_VERSION, "%s")
        else:
            run_migrations(conn.execute, _MIGRATIONS, version, "%s")
    return SCHEMA_VERSION


def _newer(where: str, version: int) -> SchemaMismatch:
    return newer_schema(where, version, SCHEMA_VERSION)
