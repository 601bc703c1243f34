"""A store written at schema 1 opens with today's code, is migrated once, and reads the same (§3 Schema).

``tests/fixtures/schema1/runs.db`` was made by durable_nb as it was at schema 1 (its builder,
``build.py``, says how), with ``answers.json``: what that code read back of every run. On
PostgreSQL the same rows are loaded into a schema-1 database built from the same script. After
the upgrade every run's history, status, state and state at every checkpoint must be what it
was; and the runs go on: a failed run resumes, a gate is approved, a run is forked, a notebook's
cells restore.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import db_path, execute_sql, is_postgres
from IPython.core.interactiveshell import InteractiveShell

import durable_nb as dnb
from durable_nb._loop import run_sync
from durable_nb.engine.values import ValueCodec
from durable_nb.store import ddl
from durable_nb.store.secret import load_secret
from durable_nb.store.sqlite_schema import SCHEMA_VERSION

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "schema1"
sys.path.insert(0, str(FIXTURE))
import schema1_flows as flows  # noqa: E402 - the fixture's workflows live beside it

ANSWERS = json.loads((FIXTURE / "answers.json").read_text())
TABLES = ("runs", "checkpoints", "pending_interrupts", "idempotency", "blobs", "events", "schema_version")


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=repr, sort_keys=True))


def _load_into_postgres(url: str) -> None:
    import psycopg

    from durable_nb.store.postgres import _split

    conninfo, options = _split(url)
    source = sqlite3.connect(FIXTURE / "runs.db")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{options["schema"]}"')
        conn.execute(f'SET search_path TO "{options["schema"]}"')
        conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)")
        for statement in ddl.schema_v1("DOUBLE PRECISION", "BYTEA", "BIGINT").split(";"):
            if statement.strip():
                conn.execute(statement)
        for table in TABLES:
            cursor = source.execute(f"SELECT * FROM {table}")
            columns = [d[0] for d in cursor.description]
            for row in cursor.fetchall():
                values = [bytes(v) if isinstance(v, bytes | memoryview) else v for v in row]
                conn.execute(
                    f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})",
                    values,
                )
    source.close()


@pytest.fixture
def upgraded(store_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("DURABLE_NB_SECRET", "fixture-secret")
    if is_postgres(store_url):
        _load_into_postgres(store_url)
    else:
        shutil.copy(FIXTURE / "runs.db", db_path(store_url))
    assert execute_sql(store_url, "SELECT MAX(version) FROM schema_version") == [(1,)]
    return store_url


def _answers(store: Any, run_id: str) -> dict[str, Any]:
    history = dnb.history(run_id, store=store)
    codec = ValueCodec(store, load_secret())
    at = {}
    for row in history.itertuples():
        state = run_sync(store.state_at(run_id, int(row.seq)))
        at[str(int(row.seq))] = {"values": _plain(run_sync(codec.load(state.manifest))), "completed": state.completed}
    return {
        "name": dnb.get_run(run_id, store=store).name,
        "history": _plain(
            [
                {"seq": int(r.seq), "step": r.step, "status": str(r.status), "changed": sorted(r.changed)}
                for r in history.itertuples()
            ]
        ),
        "status": _plain(dnb.status(run_id, store=store)),
        "state": _plain(dnb.get_run(run_id, store=store).state),
        "at": at,
    }


def test_every_run_reads_as_it_did_before_the_upgrade(upgraded: str) -> None:
    """History, status, state and the state at every checkpoint are unchanged by the migration."""
    store = dnb.connect(upgraded)
    for key, run_id in ANSWERS["runs"].items():
        assert _answers(store, run_id) == ANSWERS["answers"][key], key
    versions = sorted(v for (v,) in execute_sql(upgraded, "SELECT version FROM schema_version"))
    assert versions == list(range(1, SCHEMA_VERSION + 1))
    assert len(dnb.runs(store=store)) == len(ANSWERS["runs"])
    tree = dnb.forks(ANSWERS["runs"]["fork_of_fork"], store=store)
    assert set(tree["run_id"]) == {ANSWERS["runs"][k] for k in ("chain", "fork", "fork_of_fork")}


def test_upgraded_runs_go_on(upgraded: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """After the upgrade, a failed run resumes, a waiting gate is approved and a run forks."""
    store = dnb.connect(upgraded)
    runs = ANSWERS["runs"]
    monkeypatch.setenv("FIXTURE_FIXED", "1")
    resumed = flows.failing(store).resume(runs["failing"])
    assert resumed.status == "completed" and resumed.state["z"] == 4
    approved = flows.gated(store).approve(runs["gated"], comment="after the upgrade")
    assert approved.status == "completed" and approved.state["approved"] is True
    history = dnb.history(runs["fork"], store=store)
    at_n3 = history[history["step"] == "after:n3"]["checkpoint_id"].iloc[0]
    forked = flows.chain(store).fork(runs["fork"], at_n3, state={"v0": -1})
    assert forked.status == "completed"
    assert forked.state == {**ANSWERS["answers"]["fork"]["state"], "v0": -1}


def test_an_upgraded_notebook_run_restores_its_cells(upgraded: str) -> None:
    """N3: the cells a notebook committed before the upgrade restore in a new kernel."""
    shell = InteractiveShell()
    shell.run_line_magic("load_ext", "durable_nb")
    shell.run_cell(f"%durable run fixture-notebook --store {upgraded}")
    cells = ("%%durable load\nrows = [1, 2, 3]\nlabel = 'sales'", "%%durable grow\nrows.append(4)\ntotal = sum(rows)")
    for cell in cells:
        result = shell.run_cell(cell)
        assert result.success, result.error_in_exec
    assert shell.user_ns["rows"] == [1, 2, 3, 4] and shell.user_ns["total"] == 10
    result = shell.run_cell("%%durable more\nrows.append(5)")
    assert result.success and shell.user_ns["rows"] == [1, 2, 3, 4, 5]
