"""A store written at schema 1 opens with today's code, is migrated once, and reads the same.

``tests/fixtures/schema1/runs.db`` was made by durable_nb as it was at schema 1 (its builder,
``build.py``, says how), with ``answers.json``: what that code read back of every run. On
PostgreSQL the same rows are loaded into a schema-1 database built from the same script. After
the upgrade every run's history, status, state and state at every checkpoint must be what it
was; and the runs go on: a failed run resumes, a gate is approved, a run is forked, a notebook's
cells restore.

``tests/fixtures/schema3`` is the same for schema 3, the last before JSON values and lists were
signed: the upgrade seals them under the key, they read as before, and one forged in their old
form afterwards is refused.

``tests/fixtures/schema6`` is the same for schema 6, the last that stored LangGraph's pending
writes as signed JSON records: the upgrade moves them into rows of their own, signed, and every
thread lists as it did, its writes included.

``tests/fixtures/schema7`` is the same for schema 7, the last whose events table was a rowid
table: the upgrade copies it into a table keyed by its primary key only (on SQLite), and every
run and thread reads as before, through every view.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import db_path, execute_sql, is_postgres, new_store
from IPython.core.interactiveshell import InteractiveShell

import durable_nb as dnb
from durable_nb._loop import run_sync
from durable_nb.store import codec
from durable_nb.store.secret import load_secret
from durable_nb.store.sqlite_schema import SCHEMA_VERSION

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "schema1"
sys.path.insert(0, str(FIXTURE))
import schema1_flows as flows  # noqa: E402 - the fixture's workflows live beside it

ANSWERS = json.loads((FIXTURE / "answers.json").read_text())

# The last schema before JSON values and lists were signed: they are stored under their SHA-256.
FIXTURE_3 = FIXTURE.parent / "schema3"
sys.path.insert(0, str(FIXTURE_3))
import schema3_flows as flows3  # noqa: E402

ANSWERS_3 = json.loads((FIXTURE_3 / "answers.json").read_text())
sys.path.insert(0, str(FIXTURE.parent))
from readback import answers, plain, run_views, thread_answers, thread_listing  # noqa: E402 - what the builders read back

THREAD = {"configurable": {"thread_id": "fixture-ticket"}}
TABLES = ("runs", "checkpoints", "pending_interrupts", "idempotency", "blobs", "events", "schema_version")
# Tables a fixture holds rows of from the version that added them.
LATER_TABLES = {7: ("pending_writes",)}


def _load_into_postgres(url: str, fixture: Path = FIXTURE, version: int = 1) -> None:
    """Load a fixture's rows into a PostgreSQL schema built as durable_nb built it at ``version``."""
    import psycopg

    from durable_nb.store.postgres import _split
    from durable_nb.store.postgres_schema import _MIGRATIONS

    conninfo, options = _split(url)
    source = sqlite3.connect(fixture / "runs.db")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{options["schema"]}"')
        conn.execute(f'SET search_path TO "{options["schema"]}"')
        conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)")
        for step in _MIGRATIONS[:version]:
            if callable(step):
                step(conn.execute, "%s")  # on an empty store: its DDL, nothing to carry over
                continue
            for statement in step.split(";"):
                if statement.strip():
                    conn.execute(statement)
        later = [table for since, names in LATER_TABLES.items() if version >= since for table in names]
        for table in (*TABLES, *later):
            cursor = source.execute(f"SELECT * FROM {table}")
            columns = [d[0] for d in cursor.description]
            for row in cursor.fetchall():
                values = [bytes(v) if isinstance(v, bytes | memoryview) else v for v in row]
                conn.execute(
                    f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})",
                    values,
                )
    source.close()


def _fixture_store(store_url: str, monkeypatch: pytest.MonkeyPatch, fixture: Path, version: int) -> str:
    """Put a fixture's store (at schema ``version``) where ``store_url`` points, with its key."""
    monkeypatch.setenv("DURABLE_NB_SECRET", "fixture-secret")
    if is_postgres(store_url):
        _load_into_postgres(store_url, fixture, version)
    else:
        shutil.copy(fixture / "runs.db", db_path(store_url))
    assert execute_sql(store_url, "SELECT MAX(version) FROM schema_version") == [(version,)]
    return store_url


def _refused_with_another_key(url: str, monkeypatch: pytest.MonkeyPatch, version: int) -> None:
    """Open a fixture's store with another key: the upgrade is refused (TamperedValueError saying
    the store was left unchanged) and the store stays at ``version``; then set its key back."""
    monkeypatch.setenv("DURABLE_NB_SECRET", "another-secret")
    refused = new_store(url)
    with pytest.raises(dnb.TamperedValueError, match="was left unchanged"):
        dnb.runs(store=refused)
    run_sync(refused.close())
    assert execute_sql(url, "SELECT MAX(version) FROM schema_version") == [(version,)]
    monkeypatch.setenv("DURABLE_NB_SECRET", "fixture-secret")


@pytest.fixture
def upgraded(store_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    return _fixture_store(store_url, monkeypatch, FIXTURE, 1)


def test_every_run_reads_as_it_did_before_the_upgrade(upgraded: str) -> None:
    """History, status, state and the state at every checkpoint are unchanged by the migration."""
    store = dnb.connect(upgraded)
    for key, run_id in ANSWERS["runs"].items():
        assert answers(store, run_id) == ANSWERS["answers"][key], key
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
    """The cells a notebook committed before the upgrade restore in a new kernel."""
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


# -- a store written before JSON values and lists were signed ----------------------------------------


@pytest.fixture
def upgraded_3(store_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    return _fixture_store(store_url, monkeypatch, FIXTURE_3, 3)


def _unsigned(url: str) -> list[tuple[str, str | None]]:
    """The values stored under an unsigned address (JSON, lists), with their seals."""
    return execute_sql(url, "SELECT hash, seal FROM blobs WHERE substr(hash, 1, 2) IN ('j-', 'l-') ORDER BY hash")


def test_values_stored_before_signing_read_the_same_after_the_upgrade(upgraded_3: str) -> None:
    """The upgrade seals every JSON value and list stored under its SHA-256 with the key, and they read
    as before: every run at every checkpoint, and the LangGraph thread through a new saver."""
    from durable_nb.langgraph import DurableSaver

    store = dnb.connect(upgraded_3)
    for key, run_id in ANSWERS_3["runs"].items():
        assert answers(store, run_id) == ANSWERS_3["answers"][key], key
    assert thread_answers(flows3.ticket_graph(DurableSaver(store)), THREAD) == ANSWERS_3["thread"]
    sealed = _unsigned(upgraded_3)
    assert {address[:2] for address, _ in sealed} == {"j-", "l-"}
    assert all(seal == codec.seal(address, load_secret()) for address, seal in sealed)


def test_runs_stored_before_signing_go_on(upgraded_3: str) -> None:
    """After the upgrade the ledger's gate is approved and its list stored in chunks grows by an entry;
    the LangGraph thread resumes from its interrupt with the values it stored before."""
    from langgraph.types import Command

    from durable_nb.langgraph import DurableSaver

    store = dnb.connect(upgraded_3)
    run_id = ANSWERS_3["runs"]["ledger"]
    before = ANSWERS_3["answers"]["ledger"]["state"]
    done = flows3.ledger(store).approve(run_id, comment="after the upgrade")
    assert done.status == "completed"
    expected = {**before, "entries": [*before["entries"], {"n": 23, "memo": "closed"}], "closed": True}
    assert plain(dnb.get_run(run_id, store=store).state) == plain(expected)
    result = flows3.ticket_graph(DurableSaver(store)).invoke(Command(resume="once"), THREAD)
    assert result == {**ANSWERS_3["thread"]["values"], "answer": "once"}


@pytest.mark.parametrize("name", ["round", "entries"], ids=["json", "list"])
@pytest.mark.parametrize("attack", ["edited", "added", "seal-copied", "other-key"])
def test_values_stored_before_signing_cannot_be_forged_after_the_upgrade(
    upgraded_3: str, monkeypatch: pytest.MonkeyPatch, attack: str, name: str
) -> None:
    """After the upgrade a value under an unsigned address loads only as it was sealed: its bytes
    edited, one added in that form (without a seal, or with another value's), or another key, and
    reading the run raises TamperedValueError."""
    from forgekit import compact, forge_blob, point_head_at

    store = dnb.connect(upgraded_3)
    run_id = ANSWERS_3["runs"]["ledger"]
    address = run_sync(store.state_at(run_id)).manifest[name]
    assert address.startswith("l-" if name == "entries" else "j-")
    ((data, seal),) = execute_sql(upgraded_3, "SELECT data, seal FROM blobs WHERE hash = ?", (address,))
    assert dnb.get_run(run_id, store=store).state[name] == ANSWERS_3["answers"]["ledger"]["state"][name]
    # Another value of the same kind: the round number changed, the chunks of the list swapped.
    other = compact(99) if name == "round" else compact(json.loads(bytes(data))[::-1])
    if attack == "edited":
        execute_sql(upgraded_3, "UPDATE blobs SET data = ? WHERE hash = ?", (other, address))
    elif attack in ("added", "seal-copied"):
        codec_name, parts = ("list", [c[0] for c in json.loads(bytes(data))]) if name == "entries" else ("json", None)
        forged = forge_blob(upgraded_3, other, address[:2], codec_name, parts)
        if attack == "seal-copied":
            execute_sql(upgraded_3, "UPDATE blobs SET seal = ? WHERE hash = ?", (seal, forged))
        point_head_at(upgraded_3, run_id, name, forged)
    else:
        monkeypatch.setenv("DURABLE_NB_SECRET", "another-secret")

    with pytest.raises(dnb.TamperedValueError):
        _ = dnb.get_run(run_id, store=store).state


def test_the_upgrade_refuses_a_key_that_signed_none_of_the_stores_values(
    upgraded_3: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opened first by a process with another key, the store is not upgraded (its JSON values would be
    sealed with a key its processes do not hold): TamperedValueError saying which key to use, the store
    left at schema 3; opened with its key, it upgrades and reads as before."""
    _refused_with_another_key(upgraded_3, monkeypatch, 3)
    store = new_store(upgraded_3)
    try:
        assert answers(store, ANSWERS_3["runs"]["ledger"]) == ANSWERS_3["answers"]["ledger"]
    finally:
        run_sync(store.close())


# -- a store written while pending writes were JSON records --------------------------------------------

FIXTURE_6 = FIXTURE.parent / "schema6"
sys.path.insert(0, str(FIXTURE_6))
import schema6_flows as flows6  # noqa: E402

ANSWERS_6 = json.loads((FIXTURE_6 / "answers.json").read_text())
THREADS_6 = {name: {"configurable": {"thread_id": f"fixture-{name}"}} for name in ANSWERS_6}


@pytest.fixture
def upgraded_6(store_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    return _fixture_store(store_url, monkeypatch, FIXTURE_6, 6)


def _records(url: str) -> int:
    return execute_sql(url, "SELECT COUNT(*) FROM idempotency WHERE substr(key, 1, 4) = 'lgw:'")[0][0]


def test_pending_writes_stored_as_records_list_the_same_after_the_upgrade(upgraded_6: str) -> None:
    """Every checkpoint of every thread lists with the pending writes it had (an error, outputs,
    resumes, an interrupt stored twice of which the latest counts), each now a signed row."""
    from durable_nb.langgraph import DurableSaver

    records = _records(upgraded_6)
    assert records > 0
    saver = DurableSaver(dnb.connect(upgraded_6))
    graph = flows6.order_graph(saver, {"pack": False})
    for name, config in THREADS_6.items():
        assert thread_listing(saver, config) == ANSWERS_6[name]["listed"], name
        assert thread_answers(graph, config) == ANSWERS_6[name]["state"], name
    assert _records(upgraded_6) == 0
    rows = execute_sql(
        upgraded_6, "SELECT checkpoint_id, task_id, idx, channel, task_path, value_hash, mac FROM pending_writes"
    )
    # Special writes stored again for a task and checkpoint became one row: fewer rows than records.
    assert 0 < len(rows) < records
    key = load_secret()
    assert all(mac == codec.write_mac(key, *fields) for *fields, mac in rows)
    assert execute_sql(upgraded_6, "SELECT MAX(version) FROM schema_version") == [(SCHEMA_VERSION,)] == [(8,)]


def test_threads_stored_before_the_upgrade_go_on_and_keep_their_values(upgraded_6: str) -> None:
    """The paused thread resumes with its earlier answer; after one thread is deleted and the values
    collected, its copy still lists its writes (their values stay alive through the rows)."""
    from langgraph.types import Command

    from durable_nb.langgraph import DurableSaver

    saver = DurableSaver(dnb.connect(upgraded_6))
    graph = flows6.order_graph(saver, {"pack": False})
    result = graph.invoke(Command(resume="no"), THREADS_6["paused"])
    assert result["answers"] == ["yes", "no"]
    saver.delete_thread("fixture-done")
    assert list(saver.list(THREADS_6["done"])) == []
    assert thread_listing(saver, THREADS_6["copy"]) == ANSWERS_6["copy"]["listed"]


def test_the_upgrade_of_pending_writes_refuses_another_key(upgraded_6: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Opened first by a process with another key, the store is not upgraded (its writes would be
    signed with a key its processes do not hold): TamperedValueError, the store left at schema 6
    with its records; opened with its key, it upgrades."""
    records = _records(upgraded_6)
    _refused_with_another_key(upgraded_6, monkeypatch, 6)
    assert _records(upgraded_6) == records
    store = new_store(upgraded_6)
    try:
        assert len(dnb.runs(store=store)) == len(THREADS_6)
    finally:
        run_sync(store.close())
    assert _records(upgraded_6) == 0


# -- a store written while events were a rowid table ------------------------------------------------

FIXTURE_7 = FIXTURE.parent / "schema7"
sys.path.insert(0, str(FIXTURE_7))
import schema7_flows as flows7  # noqa: E402

ANSWERS_7 = json.loads((FIXTURE_7 / "answers.json").read_text())
THREADS_7 = {"tally": "fixture-tally", "copy": "fixture-tally-copy"}


@pytest.fixture
def upgraded_7(store_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    return _fixture_store(store_url, monkeypatch, FIXTURE_7, 7)


def _counts(url: str) -> dict[str, int]:
    return {table: execute_sql(url, f"SELECT COUNT(*) FROM {table}")[0][0] for table in (*TABLES, "pending_writes")}


def _events_table(url: str) -> str:
    """The events table's CREATE TABLE text, white space folded."""
    return " ".join(execute_sql(url, "SELECT sql FROM sqlite_master WHERE name = 'events'")[0][0].split())


def test_a_schema_7_store_reads_the_same_through_every_view_after_the_upgrade(upgraded_7: str) -> None:
    """Every run (history, status, state at every checkpoint, the history view, each checkpoint by
    id, its events and forks) and every LangGraph checkpoint (values, writes, metadata, parent) read
    as schema 7's code read them; every row is kept; on SQLite the events table is keyed by its
    primary key only."""
    from durable_nb.langgraph import DurableSaver

    before = _counts(upgraded_7)
    if not is_postgres(upgraded_7):
        assert not _events_table(upgraded_7).endswith("WITHOUT ROWID")
    store = dnb.connect(upgraded_7)
    for key, run_id in ANSWERS_7["runs"].items():
        assert answers(store, run_id) == ANSWERS_7["answers"][key], key
        assert run_views(store, run_id) == ANSWERS_7["views"][key], key
    saver = DurableSaver(store)
    graph = flows7.tally_graph(saver)
    for name, thread in THREADS_7.items():
        config = {"configurable": {"thread_id": thread}}
        listed = thread_listing(saver, config, with_metadata=True)
        assert listed == ANSWERS_7["threads"][name]["listed"], name
        assert thread_answers(graph, config) == ANSWERS_7["threads"][name]["state"], name
    after = _counts(upgraded_7)
    assert after == {**before, "schema_version": before["schema_version"] + 1}
    assert execute_sql(upgraded_7, "SELECT MAX(version) FROM schema_version") == [(SCHEMA_VERSION,)] == [(8,)]
    if not is_postgres(upgraded_7):
        assert _events_table(upgraded_7).endswith(") WITHOUT ROWID")
        assert execute_sql(upgraded_7, "SELECT name FROM sqlite_master WHERE tbl_name = 'events_v7'") == []


def test_schema_7_runs_and_threads_go_on_after_the_upgrade(upgraded_7: str) -> None:
    """After the upgrade the waiting gate is approved, a run forks, the paused thread resumes, and
    each run's events go on from the number they had reached."""
    from langgraph.types import Command

    from durable_nb.langgraph import DurableSaver

    store = dnb.connect(upgraded_7)
    runs = ANSWERS_7["runs"]
    events_before = len(ANSWERS_7["views"]["counting"]["events"])
    approved = flows7.counting(store).approve(runs["counting"], comment="after the upgrade")
    assert approved.status == "completed" and approved.state["approved"] is True
    events = dnb.events(runs["counting"], store=store)
    assert list(events["seq"]) == list(range(1, len(events) + 1)) and len(events) > events_before
    history = dnb.history(runs["chain"], store=store)
    at_n2 = history[history["step"] == "after:n2"]["checkpoint_id"].iloc[0]
    forked = flows7.chain(store).fork(runs["chain"], at_n2, state={"v1": -1})
    assert forked.status == "completed" and forked.state["v1"] == -1 and forked.state["v3"] == 30
    assert set(dnb.forks(runs["chain"], store=store)["run_id"]) == {runs["chain"], runs["fork"], forked.id}
    graph = flows7.tally_graph(DurableSaver(store))
    result = graph.invoke(Command(resume="yes"), {"configurable": {"thread_id": "fixture-tally"}})
    assert result["count"] == 3 and result["log"][-1] == "yes"


@pytest.mark.sqlite_only
def test_an_upgrade_to_schema_8_that_fails_leaves_the_store_as_it_was(
    upgraded_7: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The events table is copied in the upgrade's one transaction: a failure once the rows are
    copied (a full disk) leaves the store at schema 7 with its events table and every row; the
    next open upgrades it."""
    from durable_nb.store import migrations

    before = _counts(upgraded_7)
    events = execute_sql(upgraded_7, "SELECT * FROM events ORDER BY run_id, seq")
    table = _events_table(upgraded_7)
    rebuild = migrations.key_events_by_their_key

    def failing(create: str) -> migrations.Step:
        step = rebuild(create)

        def copy_then_fail(execute: Any, placeholder: str) -> None:
            step(execute, placeholder)  # type: ignore[operator]
            raise sqlite3.OperationalError("database or disk is full")

        return copy_then_fail

    monkeypatch.setattr(migrations, "key_events_by_their_key", failing)
    refused = new_store(upgraded_7)
    with pytest.raises(dnb.StoreUnavailable, match="disk is full"):
        dnb.runs(store=refused)
    run_sync(refused.close())
    assert execute_sql(upgraded_7, "SELECT MAX(version) FROM schema_version") == [(7,)]
    assert _counts(upgraded_7) == before and _events_table(upgraded_7) == table
    assert execute_sql(upgraded_7, "SELECT * FROM events ORDER BY run_id, seq") == events
    monkeypatch.setattr(migrations, "key_events_by_their_key", rebuild)
    store = new_store(upgraded_7)
    try:
        assert len(dnb.runs(store=store)) == len(ANSWERS_7["runs"]) + len(THREADS_7)
    finally:
        run_sync(store.close())
    assert execute_sql(upgraded_7, "SELECT * FROM events ORDER BY run_id, seq") == events
