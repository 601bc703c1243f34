"""SQLite specifics (README: The store): location, permissions, durability pragmas, schema versions, the key file."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import db_path, env_with_repo

import durable_nb as dnb
from durable_nb._loop import run_sync
from durable_nb.store.secret import key_file_path, load_secret
from durable_nb.store.sqlite import SQLiteStore
from durable_nb.store.sqlite_schema import SCHEMA_VERSION

pytestmark = pytest.mark.sqlite_only


def pragma(store: dnb.Store, name: str) -> object:
    assert isinstance(store, SQLiteStore)
    return run_sync(store._run(lambda conn: conn.execute(f"PRAGMA {name}").fetchone()[0]))


def touch(store: dnb.Store) -> None:
    run_sync(store.list_runs())


def test_default_store_location_and_mode(tmp_path: Path) -> None:
    """With no URL the store is .durable_nb/runs.db under the working directory, mode 0600."""
    store = dnb.connect()
    touch(store)
    path = tmp_path / ".durable_nb" / "runs.db"
    assert path.exists()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_env_variable_selects_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DURABLE_NB_STORE names the store when no URL is given."""
    monkeypatch.setenv("DURABLE_NB_STORE", f"sqlite:///{tmp_path}/from-env.db")
    touch(dnb.connect())
    assert (tmp_path / "from-env.db").exists()
    assert not (tmp_path / ".durable_nb").exists()


def test_relative_and_absolute_urls(tmp_path: Path) -> None:
    """sqlite:///relative.db is under the working directory; four slashes make it absolute."""
    touch(dnb.connect("sqlite:///rel/runs.db"))
    assert (tmp_path / "rel" / "runs.db").exists()
    touch(dnb.connect(f"sqlite:///{tmp_path}/abs.db"))
    assert (tmp_path / "abs.db").exists()
    assert dnb.connect("sqlite:///rel/runs.db") is dnb.connect("sqlite:///rel/runs.db")


def test_full_durability_by_default(store_url: str) -> None:
    """WAL with synchronous=FULL by default, and a busy timeout for waiting writers."""
    store = dnb.connect(store_url)
    assert pragma(store, "journal_mode") == "wal"
    assert pragma(store, "synchronous") == 2  # FULL
    assert int(pragma(store, "busy_timeout")) >= 1000


def test_process_durability_relaxes_to_normal(store_url: str) -> None:
    """durability="process" uses synchronous=NORMAL."""
    store = dnb.connect(store_url, durability="process")
    assert pragma(store, "synchronous") == 1  # NORMAL
    with pytest.raises(ValueError, match="durability"):
        dnb.connect(store_url, durability="sometimes")


def test_schema_version_recorded(store_url: str) -> None:
    """The schema is versioned in schema_version."""
    touch(dnb.connect(store_url))
    with sqlite3.connect(store_url[len("sqlite:///") :]) as conn:
        versions = [row[0] for row in conn.execute("SELECT version FROM schema_version")]
    assert versions == list(range(1, SCHEMA_VERSION + 1))


# Opens the store at argv[1] in a fresh process and prints every statement its connection ran:
# sqlite3.connect is wrapped (in that process only) to trace each real connection from its start.
_TRACE_OPEN = """
import json, sqlite3, sys
statements = []
real_connect = sqlite3.connect
def traced_connect(*args, **kwargs):
    conn = real_connect(*args, **kwargs)
    conn.set_trace_callback(statements.append)
    return conn
sqlite3.connect = traced_connect
import durable_nb as dnb
from durable_nb._loop import run_sync
run_sync(dnb.connect(sys.argv[1]).list_runs())
print(json.dumps(statements))
"""


def statements_opening(url: str) -> list[str]:
    """The SQL a new process runs to open the store at ``url`` and list its runs."""
    result = subprocess.run(
        [sys.executable, "-c", _TRACE_OPEN, url], capture_output=True, text=True, env=env_with_repo(), check=True
    )
    return [" ".join(s.split()) for s in json.loads(result.stdout.splitlines()[-1])]


def _changes_schema(statement: str) -> bool:
    return statement.upper().startswith(("CREATE", "ALTER", "DROP", "INSERT INTO SCHEMA_VERSION", "UPDATE"))


def test_opening_a_store_at_this_schema_reads_its_version_once(store_url: str) -> None:
    """Opening a store that is up to date runs no DDL and one read of its schema version."""
    touch(dnb.connect(store_url))
    dnb.store.disconnect(store_url)
    statements = statements_opening(store_url)
    assert not [s for s in statements if _changes_schema(s)]
    assert [s for s in statements if "schema_version" in s or "sqlite_master" in s] == [
        "SELECT MAX(version) FROM schema_version"
    ]
    assert not [s for s in statements if s.startswith("BEGIN")], "no write transaction to open a store"


# What creating a new store's schema runs inside its transaction: a read of its version, the
# schema_version table, the 16 tables and indexes of today's schema, and one insert of the versions.
NEW_SCHEMA_STATEMENTS = 19


def test_a_new_store_creates_its_schema_in_one_transaction(store_url: str) -> None:
    """A new file gets its whole schema, as the versions leave it, in one IMMEDIATE transaction."""
    statements = statements_opening(store_url)
    begins = [i for i, s in enumerate(statements) if s.startswith("BEGIN")]
    assert len(begins) == 1 and statements[begins[0]] == "BEGIN IMMEDIATE"
    end = statements.index("COMMIT", begins[0])
    inside = statements[begins[0] + 1 : end]
    assert [s for s in statements if _changes_schema(s)] == [s for s in inside if _changes_schema(s)]
    # The tables as they stand now, not every version's steps; every version recorded in one row set.
    assert sum(s.startswith("INSERT INTO schema_version") for s in inside) == 1
    assert len(inside) <= NEW_SCHEMA_STATEMENTS, inside


def test_two_stores_on_one_file_see_each_other(store_url: str) -> None:
    """Separate connections to one file share runs (as separate processes do)."""
    flow = dnb.Workflow("shared", store=store_url)

    @flow.node()
    def only(state):
        return {"v": dnb.gate("ok").approved}

    run = flow.run({})
    path = store_url[len("sqlite:///") :]
    other = SQLiteStore(store_url, path)
    assert run_sync(other.get_run(run.id)).status.value == "paused"
    run_sync(other.close())


def test_secret_key_file_is_private(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without DURABLE_NB_SECRET a per-user key file is created once with mode 0600."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    key = load_secret()
    path = key_file_path()
    assert path == tmp_path / "cfg" / "durable_nb" / "secret.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(key) >= 32
    assert load_secret() == key
    monkeypatch.setenv("DURABLE_NB_SECRET", "from-the-environment")
    assert load_secret() == b"from-the-environment"


def test_values_signed_with_another_key_do_not_load(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store read with a different secret refuses its pickled values (TamperedValueError)."""
    monkeypatch.setenv("DURABLE_NB_SECRET", "key-one")
    flow = dnb.Workflow("keys", store=store_url)

    @flow.node()
    def make(state):
        return {"pair": (1, 2)}

    run = flow.run({})
    monkeypatch.setenv("DURABLE_NB_SECRET", "key-two")
    with pytest.raises(dnb.TamperedValueError, match="secret key"):
        dnb.get_run(run.id, store=store_url).state  # noqa: B018 - loading is the point
    monkeypatch.setenv("DURABLE_NB_SECRET", "key-one")
    assert dnb.get_run(run.id, store=store_url).state == {"pair": (1, 2)}


def test_closed_store_refuses_work(store_url: str) -> None:
    """A closed store says so."""
    store = SQLiteStore(store_url, store_url[len("sqlite:///") :])
    touch(store)
    run_sync(store.close())
    with pytest.raises(dnb.StoreUnavailable, match="closed"):
        touch(store)
    assert os.path.exists(store.path)


def test_sync_api_waits_for_a_write_lock_held_elsewhere(store_url: str) -> None:
    """The sync API runs SQLite work on its own thread with no busy wait; a lock held by another
    connection sends that work to the connection thread, which waits for it instead of failing."""
    flow = dnb.Workflow("locked", store=dnb.connect(store_url))
    holder = sqlite3.connect(db_path(store_url), isolation_level=None, check_same_thread=False)
    released: list[float] = []

    def release() -> None:
        released.append(time.monotonic())
        holder.execute("COMMIT")

    @flow.node
    def take_lock(state: dict) -> dict:
        # Another writer takes the lock while this node runs: its commit must wait for it.
        holder.execute("BEGIN IMMEDIATE")
        threading.Timer(0.4, release).start()
        return {"a": 1}

    @flow.node(after="take_lock")
    def after(state: dict) -> dict:
        return {"b": state["a"] + 1}

    run = flow.run({})
    assert released, "the commit of take_lock did not wait for the other writer"
    assert run.status == "completed"
    assert run.state == {"a": 1, "b": 2}
    steps = [c.step for c in run_sync(flow.store.list_checkpoints(run.id))]
    assert steps == ["after:take_lock", "after:after", "run_end"]
    holder.close()


def test_a_statement_with_none_values_stores_the_row_that_binding_them_would() -> None:
    """NULL written in the statement for each None value (no adapter lookup) is the same row."""
    from durable_nb.store import sqlite_ops

    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE TABLE t (a, b, c, d)")
    shapes = [(1, None, "x", None), (None, None, None, None), (1.5, b"y", "z", 0), (None, "?", None, "NULL")]
    for values in shapes:
        conn.execute("INSERT INTO t (a, b, c, d) VALUES (?, ?, ?, ?)", values)
        sqlite_ops._execute(conn, "INSERT INTO t (a, b, c, d) VALUES (?, ?, ?, ?)", values)
    stored = conn.execute("SELECT a, b, c, d, typeof(a), typeof(b), typeof(c), typeof(d) FROM t").fetchall()
    assert stored[0::2] == stored[1::2] and [row[:4] for row in stored[0::2]] == shapes
    # A condition on a None value is the one binding it would make (``IS NULL``, ``= NULL``).
    seen = "SELECT count(*) FROM t WHERE a IS ? AND b = ?"
    assert sqlite_ops._execute(conn, seen, (None, "?")).fetchone() == conn.execute(seen, (None, "?")).fetchone()


def test_a_store_another_process_creates_between_two_reads_opens(tmp_path: Path) -> None:
    """Opening a new file reads its version, then (with none found) its tables. A process that
    creates the store between the two reads made it: its version is read, not refused as foreign."""
    from durable_nb.store import sqlite_schema

    path = tmp_path / "runs.db"
    run_sync(dnb.connect(f"sqlite:///{path}").list_runs())  # created whole, as the other process would
    conn = sqlite3.connect(path)
    try:
        # Where the first read found no schema_version table, the second finds the whole store.
        assert sqlite_schema._unversioned(conn, str(path)) == SCHEMA_VERSION
    finally:
        conn.close()


@pytest.mark.parametrize("count", [1, 2, 8, 9, 40])
def test_the_condition_that_values_are_held_holds_only_when_each_is(count: int) -> None:
    """A commit's check that the store still holds values stored before: each is looked up (a
    few) or counted in one list (many), and one missing fails it either way."""
    from durable_nb.store.rows import blobs_held

    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE blobs (hash TEXT PRIMARY KEY)")
    addresses = [f"p-{i:064x}" for i in range(count)]
    conn.executemany("INSERT INTO blobs VALUES (?)", [(a,) for a in addresses])
    held = f"SELECT 1 WHERE 1{blobs_held(count, '?')}"
    assert conn.execute(held, addresses).fetchone() == (1,)
    conn.execute("DELETE FROM blobs WHERE hash = ?", (addresses[count // 2],))
    assert conn.execute(held, addresses).fetchone() is None
    assert blobs_held(0, "?") == ""
