"""A mistyped store URL is refused by everything that only reads; only starting a run creates a store.

``durable-nb runs --store sqlite:////nonexistent/dir/x.db`` once made the folders and an empty
database, printed "(none)" and exited 0. Now the commands that read or act on stored runs (runs,
show, history, approve, reject, cancel, fork, prune, resume, recover) and the Python calls given a
URL explicitly (``dnb.history(run, store="sqlite:///typo.db")``) raise ``StoreNotFound`` naming the
place, and create nothing: no file or folder for SQLite, no schema or table for PostgreSQL (where a
schema without durable_nb's tables counts as no store). The default store of the Python API is still
created on first use; commands that start runs (a workflow's run, the demo) create their store.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import execute_sql, is_postgres

import durable_nb as dnb
from durable_nb.cli import EXIT_NOT_FOUND, main
from durable_nb.store import disconnect


def _missing_sqlite(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/nonexistent/dir/x.db"


@pytest.fixture
def missing_url(store_url: str, tmp_path: Path) -> Iterator[str]:
    """A URL of each backend naming no store: a file in a folder that does not exist, or a schema
    that does not exist in a database that does."""
    if not is_postgres(store_url):
        url = _missing_sqlite(tmp_path)
        yield url
        disconnect(url)
        return
    url = store_url.replace("schema=", f"schema=nope_{uuid.uuid4().hex[:8]}_")
    yield url
    disconnect(url)


def _nothing_created(url: str, tmp_path: Path, store_url: str) -> None:
    if is_postgres(url):
        schema = url.rsplit("schema=", 1)[1]
        assert execute_sql(store_url, "SELECT nspname FROM pg_namespace WHERE nspname = ?", (schema,)) == []
    else:
        assert not (tmp_path / "nonexistent").exists()


def _one_node_flow(url: str) -> dnb.Workflow:
    flow = dnb.Workflow("starts", store=url)

    @flow.node()
    def step(state: dict[str, Any]) -> dict[str, Any]:
        return {"x": 1}

    return flow


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


READING_COMMANDS = [
    ["runs"],
    ["show", "0192f0c1"],
    ["history", "0192f0c1"],
    ["approve", "0192f0c1"],
    ["reject", "0192f0c1"],
    ["cancel", "0192f0c1"],
    ["fork", "0192f0c1", "--set", "x=1"],
    ["prune", "--older-than", "30d"],
    ["recover"],
]


@pytest.mark.parametrize("command", READING_COMMANDS, ids=lambda c: c[0])
def test_commands_that_read_refuse_a_store_that_does_not_exist(
    missing_url: str, store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """Exit 4 and one line naming the store and what to do; nothing is created, in text or JSON."""
    code, out, err = cli(capsys, *command, "--store", missing_url)
    assert code == EXIT_NOT_FOUND and out == "", (out, err)
    assert err.startswith("error: No durable_nb store at ") and err.count("\n") == 1, err
    assert "check the store url" in err.lower() and "start a run" in err
    shown = missing_url.rsplit("schema=", 1)[1] if is_postgres(missing_url) else "nonexistent/dir/x.db"
    assert shown in err
    code, out, err = cli(capsys, *command, "--store", missing_url, "--json")
    assert code == EXIT_NOT_FOUND and json.loads(err)["error"]["type"] == "StoreNotFound"
    _nothing_created(missing_url, tmp_path, store_url)


def test_the_default_store_must_exist_for_commands_that_read(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --store, `durable-nb runs` in a folder without .durable_nb/runs.db says so instead of
    leaving a store in whatever folder it was typed in."""
    code, _, err = cli(capsys, "runs")
    assert code == EXIT_NOT_FOUND and ".durable_nb/runs.db" in err, err
    assert not Path(".durable_nb").exists()


PYTHON_READERS: list[tuple[str, Callable[[str], Any]]] = [
    ("runs", lambda url: dnb.runs(store=url)),
    ("history", lambda url: dnb.history("0192f0c1", store=url)),
    ("events", lambda url: dnb.events("0192f0c1", store=url)),
    ("forks", lambda url: dnb.forks("0192f0c1", store=url)),
    ("compare", lambda url: dnb.compare(["0192f0c1"], store=url)),
    ("status", lambda url: dnb.status("0192f0c1", store=url)),
    ("get_run", lambda url: dnb.get_run("0192f0c1", store=url)),
    ("approve", lambda url: dnb.approve("0192f0c1", store=url)),
    ("cancel", lambda url: dnb.cancel("0192f0c1", store=url)),
    ("fork", lambda url: dnb.fork("0192f0c1", store=url)),
    ("prune", lambda url: dnb.prune(3600, store=url)),
    ("recover", lambda url: dnb.recover([], store=url)),
]


@pytest.mark.parametrize("call", [c for _, c in PYTHON_READERS], ids=[n for n, _ in PYTHON_READERS])
def test_python_calls_given_a_url_refuse_a_store_that_does_not_exist(
    missing_url: str, store_url: str, tmp_path: Path, call: Callable[[str], Any]
) -> None:
    """A URL given explicitly to a call that only reads (or decides on a stored run) must name a store:
    StoreNotFound, not RunNotFound after creating an empty store."""
    with pytest.raises(dnb.StoreNotFound, match="No durable_nb store at"):
        call(missing_url)
    _nothing_created(missing_url, tmp_path, store_url)


def test_a_store_without_durable_nb_tables_is_no_store_for_readers(store_url: str, tmp_path: Path) -> None:
    """An empty SQLite file, or a PostgreSQL schema without durable_nb's tables, is not a store to read:
    refused, and readers do not create the tables. A run started there creates them as ever."""
    if is_postgres(store_url):
        schema = store_url.rsplit("schema=", 1)[1]
        execute_sql(store_url.replace(f"schema={schema}", "schema=public"), f'CREATE SCHEMA "{schema}"')
        tables = f"SELECT table_name FROM information_schema.tables WHERE table_schema = '{schema}'"
        url = store_url
    else:
        (tmp_path / "empty.db").touch()
        url = f"sqlite:///{tmp_path}/empty.db"
        tables = "SELECT name FROM sqlite_master"
    with pytest.raises(dnb.StoreNotFound, match="no durable_nb"):
        dnb.runs(store=url)
    assert execute_sql(url, tables) == []
    assert _one_node_flow(url).run({}).status == "completed"
    assert len(dnb.runs(store=url)) == 1
    disconnect(url)


def test_starting_a_run_creates_the_store_and_the_default_store_is_created_on_first_use(tmp_path: Path) -> None:
    """What creates a store is unchanged: a workflow's run on a new URL, and the Python API's default
    store (``dnb.runs()`` with no store), which is documented as created on first use."""
    assert dnb.runs().empty and Path(".durable_nb/runs.db").is_file()
    url = _missing_sqlite(tmp_path)
    assert _one_node_flow(url).run({}).status == "completed" and (tmp_path / "nonexistent/dir/x.db").is_file()
    assert len(dnb.runs(store=url)) == 1
    disconnect(url)
    disconnect()
