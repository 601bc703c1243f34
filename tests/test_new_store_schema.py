"""A new store gets the schema every version's steps would build, made in one go.

The tables and indexes of a store created new are compared with those of a store built by
running each migration in turn (as an old store upgraded to today has them): columns with their
order, types, defaults and constraints, and every index. A new version that changes the schema
changes both; this test says when only one was changed.
"""

from __future__ import annotations

import re
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import _drop_schema, _postgres_url, db_path, execute_sql, is_postgres

import durable_nb as dnb
from durable_nb._loop import run_sync
from durable_nb.store.migrations import run_migrations


def _migrated_sqlite(path: Path) -> str:
    from durable_nb.store.sqlite_schema import migrations

    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)")
    run_migrations(conn.execute, migrations(), 0, "?")
    conn.close()
    return f"sqlite:///{path}"


def _migrated_postgres(url: str) -> None:
    import psycopg

    from durable_nb.store.postgres import _split
    from durable_nb.store.postgres_schema import _MIGRATIONS

    conninfo, options = _split(url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{options["schema"]}"')
        conn.execute(f'SET search_path TO "{options["schema"]}"')
        conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)")
        run_migrations(conn.execute, _MIGRATIONS, 0, "%s")


@pytest.fixture
def migrated(store_url: str, tmp_path: Path) -> Iterator[str]:
    """A store of the same backend built by running every migration from an empty database."""
    if not is_postgres(store_url):
        yield _migrated_sqlite(tmp_path / "migrated.db")
        return
    schema = f"m_{uuid.uuid4().hex[:12]}"
    url = _postgres_url(schema)
    _migrated_postgres(url)
    yield url
    _drop_schema(schema)


def schema_of(url: str) -> dict[str, Any]:
    """The tables' columns in order (name, type, not null, default, key) and the indexes of a store
    (and on SQLite, which tables have no rowid)."""
    if is_postgres(url):
        columns = execute_sql(
            url,
            "SELECT table_name, column_name, data_type, is_nullable, column_default FROM information_schema.columns"
            " WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position",
        )
        indexes = execute_sql(url, "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()")
        # An index's definition names the schema it is in: the two stores' schemas differ by name only.
        return {
            "columns": columns,
            "indexes": sorted((name, re.sub(r" ON \S+\.", " ON ", text)) for name, text in indexes),
        }
    with sqlite3.connect(db_path(url)) as conn:
        found = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name").fetchall()
        tables = [name for name, _ in found]
        columns = {table: conn.execute(f"PRAGMA table_xinfo({table})").fetchall() for table in tables}
        # Keyed by the primary key only or by a rowid: the columns are the same either way.
        without_rowid = sorted(name for name, sql in found if sql.rstrip().upper().endswith("WITHOUT ROWID"))
        indexes = sorted(
            (name, table, " ".join((sql or "").split()))
            for name, table, sql in conn.execute("SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'index'")
        )
    conn.close()
    return {"columns": columns, "indexes": indexes, "without_rowid": without_rowid}


def test_a_new_store_has_the_schema_the_migrations_build(store_url: str, migrated: str) -> None:
    """Same columns in the same order with the same types, defaults and keys; same indexes."""
    run_sync(dnb.connect(store_url).list_runs())  # creates the new store's schema
    new, stepwise = schema_of(store_url), schema_of(migrated)
    assert new["columns"] and new["indexes"]
    assert new == stepwise
    versions = [row[0] for row in execute_sql(store_url, "SELECT version FROM schema_version ORDER BY version")]
    assert versions == [row[0] for row in execute_sql(migrated, "SELECT version FROM schema_version ORDER BY version")]


def test_the_schema_version_counts_the_migrations_of_both_backends() -> None:
    """SCHEMA_VERSION, which every open compares with, is how many steps each backend migrates by."""
    from durable_nb.store import postgres_schema, sqlite_schema
    from durable_nb.store.ddl import SCHEMA_VERSION

    assert len(sqlite_schema.migrations()) == SCHEMA_VERSION == postgres_schema.SCHEMA_VERSION
    assert sqlite_schema.SCHEMA_VERSION == SCHEMA_VERSION
