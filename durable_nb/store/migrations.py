"""The schema's ordered migrations, written once for both SQL backends.

Each backend finds its store's version and takes its own lock (SQLite's write lock, a
PostgreSQL advisory lock); the scripts, the order they run in and the refusal of a newer
schema are the same.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..errors import SchemaMismatch
from .ddl import BLOB_PARTS_V2, schema_v1, state_changes_v3

__all__ = ["migrations", "newer_schema", "run_migrations"]


def migrations(*, real: str, blob: str, bigint: str, snapshot_json: str) -> list[str]:
    """Return the scripts in order: index i takes a store from version i to i + 1."""
    return [schema_v1(real=real, blob=blob, bigint=bigint), BLOB_PARTS_V2, state_changes_v3(snapshot_json)]


def run_migrations(execute: Callable[..., Any], scripts: list[str], version: int, placeholder: str) -> int:
    """Run the scripts after ``version`` in the caller's transaction, recording each; return the new version."""
    for target in range(version, len(scripts)):
        for statement in scripts[target].split(";"):
            if statement.strip():
                execute(statement)
        execute(f"INSERT INTO schema_version VALUES ({placeholder}, {placeholder})", (target + 1, time.time()))
    return len(scripts)


def newer_schema(where: str, version: int, known: int) -> SchemaMismatch:
    """The error for a store written by a newer durable_nb: it is left unchanged."""
    return SchemaMismatch(
        f"The store {where} has schema version {version}, newer than the {known} this durable_nb "
        "knows. Upgrade durable_nb (pip install -U durable-nb) to open it; the store was left unchanged."
    )
