"""Shared fixtures: a private key folder, a temp working directory, and a store URL per backend.

Tests that take ``store_url`` (or ``store``) run against every backend: SQLite always, and
PostgreSQL when $DURABLE_NB_TEST_POSTGRES names a reachable server (CI sets it). Tests about
SQLite files themselves are marked ``sqlite_only``. Tests that drive a real front end (a Jupyter
kernel, a notebook runner, the service) name their backends with ``backends(...)``: SQLite for
most, and PostgreSQL for one test per front end, the store itself being tested on both elsewhere.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import durable_nb as dnb
from durable_nb.store import disconnect

# Nothing a session starts outlives it, and it changes no file of the repository.
pytest_plugins = ["sessioncheck"]

POSTGRES_ENV = "DURABLE_NB_TEST_POSTGRES"
BACKENDS = ["sqlite", "postgres"]
NO_POSTGRES = (
    f"PostgreSQL tests need a server: set {POSTGRES_ENV}=postgresql://user@host:5432/db "
    "(CI sets it to the local server)."
)


def pytest_configure(config: pytest.Config) -> None:
    _compile_the_package(config)
    config.addinivalue_line("markers", "sqlite_only: the test is about SQLite files, not store behaviour")
    config.addinivalue_line(
        "markers",
        "backends(*names): the store backends the test runs on (the closest marker wins, so one test "
        "of a module marked backends('sqlite') can be marked backends('sqlite', 'postgres'))",
    )


def _compile_the_package(config: pytest.Config) -> None:
    """Write durable_nb's bytecode once, before any worker starts, when Python writes none itself.

    With PYTHONDONTWRITEBYTECODE set, each of the hundreds of kernels and command-line children the
    tests start compiled the package from source (about 0.3 s of CPU each). They read bytecode that
    is there whatever the variable says, and Python checks it against each source's size and time.
    """
    if not sys.dont_write_bytecode or hasattr(config, "workerinput"):
        return
    import compileall

    compileall.compile_dir(Path(__file__).resolve().parent.parent / "durable_nb", quiet=1)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for name in ("store_url", "store"):
        if name in metafunc.fixturenames:
            metafunc.parametrize(name, _backends(metafunc.definition), indirect=True)


def _backends(definition: pytest.Function) -> list[str]:
    """The backends a test runs on: both, SQLite for ``sqlite_only``, or those its closest ``backends`` names."""
    if definition.get_closest_marker("sqlite_only"):
        return ["sqlite"]
    chosen = definition.get_closest_marker("backends")
    if chosen is None:
        return BACKENDS
    assert chosen.args and set(chosen.args) <= set(BACKENDS), chosen.args
    return list(chosen.args)


@functools.cache
def postgres_base() -> str | None:
    """Return the PostgreSQL URL to test against, or None when there is none to reach."""
    url = os.environ.get(POSTGRES_ENV)
    if not url:
        return None
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except Exception:  # noqa: BLE001 - any failure means: skip, saying how to enable
        return None
    return url


def _postgres_url(schema: str) -> str:
    base = postgres_base()
    if base is None:
        pytest.skip(NO_POSTGRES)
    return f"{base}{'&' if '?' in base else '?'}schema={schema}"


def _drop_schema(schema: str) -> None:
    import psycopg

    base = postgres_base()
    assert base is not None
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep key files and default stores out of the user's home and the repository."""
    config = tmp_path_factory.getbasetemp() / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    # IPython shells and kernels keep their history and profile here, not in ~/.ipython.
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path_factory.getbasetemp() / "ipython"))
    monkeypatch.delenv("DURABLE_NB_SECRET", raising=False)
    monkeypatch.delenv("DURABLE_NB_STORE", raising=False)
    monkeypatch.chdir(tmp_path)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    close_test_shells()


def close_test_shells() -> None:
    """Close the IPython shells the tests made, so that the process ends as soon as the summary is out.

    IPython resets each shell at interpreter exit, a full garbage collection apiece: with the hundreds
    of shells a run makes, and everything they still hold, pytest stayed alive for minutes after its
    summary. Closed here (their exit hook dropped, their history thread stopped), they cost nothing.
    """
    if "IPython.core.interactiveshell" not in sys.modules:
        return
    import atexit
    import gc

    from IPython.core.interactiveshell import InteractiveShell

    # type(), not isinstance(): a proxy among the objects could run code when asked its __class__.
    for shell in [o for o in gc.get_objects() if issubclass(type(o), InteractiveShell)]:
        atexit.unregister(shell.atexit_operations)
        if shell.history_manager is not None:
            shell.history_manager.close()


@pytest.fixture
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL of a new, empty store of one backend for one test."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/runs.db"
        yield url
        disconnect(url)
        return
    schema = f"t_{uuid.uuid4().hex[:12]}"
    url = _postgres_url(schema)
    yield url
    disconnect(url)
    _drop_schema(schema)


@pytest.fixture
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dnb.Store]:
    """A fresh store of each backend (the conformance suite takes this fixture)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/conformance.db"
        yield dnb.connect(url)
        disconnect(url)
        return
    schema = f"t_{uuid.uuid4().hex[:12]}"
    url = _postgres_url(schema)
    yield dnb.connect(url)
    disconnect(url)
    _drop_schema(schema)


@pytest.fixture
def engine_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count in ``[0]`` the Python calls of the engine thread, where a run's nodes, map items and
    commits run (the run row is not polled meanwhile: the watching thread's polls are not counted anyway)."""
    from durable_nb.engine import tracing
    from durable_nb.engine.runs import watch
    from durable_nb.engine.workflows import engine_thread

    monkeypatch.setattr(watch, "POLL_SECONDS", 3600.0)
    # Counted as in a process with no tracer provider: an earlier test in this worker may have set
    # one (OpenTelemetry's global cannot be unset), and each node's span would then be counted.
    monkeypatch.setattr(tracing, "_api", lambda: None)
    calls = [0]

    def count(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            calls[0] += 1

    drive = engine_thread.run_on_engine_loop

    def counted(coro: Any) -> Any:
        sys.setprofile(count)
        try:
            return drive(coro)
        finally:
            sys.setprofile(None)

    monkeypatch.setattr(engine_thread, "run_on_engine_loop", counted)
    return calls


@pytest.fixture
def serving(tmp_path: Path, store_url: str) -> Iterator[Any]:
    """Real ``durable-nb serve`` processes on the test's store, started by calling it; all stopped afterwards."""
    from servicekit import Servers

    servers = Servers(tmp_path, store_url)
    yield servers
    servers.stop()


@pytest.fixture
def kernels(tmp_path: Path, store_url: str) -> Iterator[Callable[[], Any]]:
    """Start real kernels working in ``tmp_path`` on the test's store; all are closed afterwards."""
    from kernelkit import Kernel

    started: list[Kernel] = []

    def new_kernel() -> Kernel:
        kernel = Kernel(tmp_path, env={"DURABLE_NB_STORE": store_url})
        started.append(kernel)
        return kernel

    yield new_kernel
    for kernel in started:
        kernel.close()


def is_postgres(url: str) -> bool:
    return url.startswith("postgresql")


def execute_sql(url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run raw SQL (``?`` placeholders) against the store's database, as an outside tool would."""
    if is_postgres(url):
        import psycopg

        from durable_nb.store.postgres import _split

        conninfo, options = _split(url)
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{options["schema"]}"')
            cursor = conn.execute(sql.replace("?", "%s"), params)
            return cursor.fetchall() if cursor.description else [(cursor.rowcount,)]
    import sqlite3

    with sqlite3.connect(db_path(url), timeout=30) as conn:
        cursor = conn.execute(sql, params)
        rows = cursor.fetchall() if cursor.description else [(cursor.rowcount,)]
    conn.close()
    return rows


def on_the_kernel_lease_thread() -> bool:
    """Whether the caller is the thread that keeps a kernel's lease (one per process, started by an
    earlier test's shell): it wakes on its own clock, so tests that count calls leave it out."""
    return threading.current_thread().name == "durable-nb-kernel-lease"


def new_store(url: str) -> dnb.Store:
    """A store object of its own (its own connections), as another process would have."""
    if is_postgres(url):
        from durable_nb.store.postgres import PostgresStore

        return PostgresStore(url)
    from durable_nb.store.sqlite import SQLiteStore

    return SQLiteStore(url, db_path(url))


def db_path(url: str) -> str:
    """Return the file path of a sqlite:/// URL."""
    return url[len("sqlite:///") :]


def env_with_repo() -> dict[str, str]:
    """Environment for child processes: the same key folder and importable project."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env


class Stated:
    """A checkpoint with the state at it (rebuilt by the store), for tests that look at both."""

    def __init__(self, record: Any, state: Any) -> None:
        self.record = record
        self.manifest = state.manifest
        self.completed = state.completed

    def __getattr__(self, name: str) -> Any:
        return getattr(self.record, name)


def stated(store: dnb.Store, run_id: str) -> list[Stated]:
    """Return a run's checkpoints, each with its state (values' addresses, completed nodes)."""
    from durable_nb._loop import run_sync

    records = run_sync(store.list_checkpoints(run_id))
    return [Stated(r, run_sync(store.state_at(run_id, r.seq))) for r in records]
