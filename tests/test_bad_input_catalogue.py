"""issue 15: every bad input gets a typed DurableError whose message says what to do — the catalogue.

Each case is one bad input and what it must produce: the error's type (a ``durable_nb.DurableError``
subclass, checked with isinstance) and a fragment of its message (a case-insensitive substring).
Where data was stored before, the case also checks that it is still intact afterwards: the runs, their
statuses and checkpoints, the open gate and every row of the store (so a refused fork leaves no run
behind and a refused approval leaves the gate open).

The cases are grouped by how they are exercised:

- ``test_refused_before_anything_is_stored``: definitions, arguments, gates outside a node, run
  input and what a headless run is given (run-notebook's paths, run names, parameters and
  parameters files, refused before any kernel starts); the call raises and the store holds no run;
- ``test_refused_store_url``: store URLs and store arguments; nothing on disk changes;
- ``test_refused_call_leaves_store_intact``: forks, resumes, decisions, cancels and views on a store
  holding a completed, a paused and a failed run;
- ``test_bad_value_fails_the_run``: a node hands back something that cannot be state; the run ends
  ``failed`` with the error's type stored and its message in the run's error, earlier commits kept;
- ``test_cli_refuses``: ``durable-nb`` exits with the documented code and one ``error: …`` line (a JSON
  object with ``--json`` naming the error's type);
- ``test_magic_refuses``: ``%%durable`` / ``%durable`` in a real IPython shell stop with a one-line
  ``UsageError`` (IPython's error for a bad magic line; when the engine refused, the DurableError it
  raised is chained), the cell body does not run and the kernel's run is unchanged;
- ``test_service_refuses``: the service over HTTP, each protection by name (the Host allow-list,
  cross-origin and non-JSON posts, the token before the body, the body limit, JSON depth, the
  approvals page's CSRF token, Origin and ``approved``) and the API's own refusals; the answer
  has the typed error's status and says what to do, and every row of the store is unchanged.

The catalogue holds 367 cases (``CASE_COUNT`` below; a test checks it).
"""

from __future__ import annotations

import asyncio
import html
import json
import math
import os
import re
import socket
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import IO, Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import durable_nb as dnb
import durable_nb.views
from durable_nb.cli import EXIT_FAILED, EXIT_NOT_FOUND, EXIT_STATE, EXIT_USAGE, main
from durable_nb.service.auth import Unauthorized
from durable_nb.service.errors import (
    BodyTooLarge,
    CrossSiteRequest,
    HostNotAllowed,
    JsonTooDeep,
    NotebookPathRefused,
    UnsupportedMediaType,
    error_from,
)
from durable_nb.store import disconnect

CASE_COUNT = 367

ErrorType = type[BaseException] | tuple[type[BaseException], ...]


# -- helpers ---------------------------------------------------------------------------------------


def _rows(url: str) -> dict[str, list[str]]:
    """Every row of every table of a SQLite store, in a stable order (as an outside tool reads them)."""
    path = url[len("sqlite:///") :]
    if not Path(path).is_file():
        return {}
    with closing(sqlite3.connect(path)) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return {t: sorted(repr(row) for row in conn.execute(f'SELECT * FROM "{t}"')) for t in tables}


def _run_count(url: str) -> int:
    path = url[len("sqlite:///") :]
    if not Path(path).is_file():
        return 0
    with closing(sqlite3.connect(path)) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return int(conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]) if "runs" in tables else 0


def _steps(url: str, run_id: str) -> list[str]:
    return list(dnb.history(run_id, store=url)["step"])


def _check(error: BaseException, expected: ErrorType, fragment: str) -> None:
    """The error is of the expected type (a DurableError) and its message holds ``fragment``."""
    assert isinstance(error, expected), f"raised {type(error).__name__}: {error}"
    assert isinstance(error, dnb.DurableError), f"raised {type(error).__name__}: {error}"
    assert fragment.lower() in str(error).lower(), f"{fragment!r} not in {str(error)!r}"


def _raised(call: Callable[[], object]) -> BaseException:
    try:
        result = call()
    except Exception as error:  # noqa: BLE001 - the case checks what was raised
        return error
    pytest.fail(f"no error raised; returned {result!r}")


def _disk(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with the bytes of its files (None for folders)."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


class World:
    """A SQLite store under ``root``. ``build()`` stores three runs: ``done`` (completed, ``x`` an int),
    ``paused`` (waiting at the gate 'publish' of node 'review') and ``failed`` (its node raised)."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.url = f"sqlite:///{root}/runs.db"
        self._files: list[IO[str]] = []
        self.plain = dnb.Workflow("plain", store=self.url)
        self.gated = dnb.Workflow("gated", store=self.url)
        self.broken = dnb.Workflow("broken", store=self.url)
        self.definition = dnb.Workflow("definition", store=self.url)  # for registration cases

        @self.plain.node(retry_count=0)
        def load(state: dict[str, Any]) -> dict[str, Any]:
            return {"rows": [1, 2, 3]}

        @self.plain.node(after="load", retry_count=0)
        def total(state: dict[str, Any]) -> dict[str, Any]:
            return {"total": sum(state["rows"]) * state["x"]}

        @self.gated.node(retry_count=0)
        def prepare(state: dict[str, Any]) -> dict[str, Any]:
            return {"draft": "hello"}

        @self.gated.node(after="prepare", retry_count=0)
        def review(state: dict[str, Any]) -> dict[str, Any]:
            decision = dnb.gate("publish", {"draft": state["draft"]})
            return {"approved": decision.approved}

        @self.broken.node(retry_count=0)
        def explode(state: dict[str, Any]) -> dict[str, Any]:
            raise RuntimeError("boom")

    def build(self) -> World:
        self.done = self.plain.run({"x": 1})
        self.paused = self.gated.run({"x": 2}, idempotency_key="paused-key")
        self.failed = self.broken.run({"x": 3})
        assert (self.done.status, self.paused.status, self.failed.status) == ("completed", "paused", "failed")
        return self

    def simple(self) -> dnb.Workflow:
        """A new one-node workflow on this store (for run input cases)."""
        flow = dnb.Workflow("simple", store=self.url)

        @flow.node(retry_count=0)
        def step(state: dict[str, Any]) -> dict[str, Any]:
            return {"seen": True}

        return flow

    def checkpoint(self, run_id: str, step: str) -> str:
        frame = dnb.history(run_id, store=self.url)
        return str(frame[frame["step"] == step]["checkpoint_id"].iloc[0])

    def open_file(self) -> IO[str]:
        handle = (self.root / "notes.txt").open("w")
        self._files.append(handle)
        return handle

    def picture(self) -> dict[str, Any]:
        """What is stored, read through the public API and as raw rows."""
        frame = dnb.runs(store=self.url)
        ids = list(frame["run_id"])
        return {
            "runs": dict(zip(ids, frame["status"].astype(str), strict=True)),
            "steps": {run_id: _steps(self.url, run_id) for run_id in ids},
            "gate": dnb.get_run(self.paused.id, store=self.url).pending_interrupt,
            "rows": _rows(self.url),
        }

    def close(self) -> None:
        for handle in self._files:
            handle.close()
        disconnect(self.url)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    found = World(tmp_path / "store")
    yield found
    found.close()


def case(case_id: str, call: Callable[[World], object], error: ErrorType, fragment: str) -> Any:
    return pytest.param(call, error, fragment, id=case_id)


def _fn(state: dict[str, Any]) -> dict[str, Any]:
    return {}


def _register(kind: str, **options: Any) -> Callable[[World], object]:
    return lambda w: getattr(w.definition, kind)(**options)(_fn)


def _loop(**options: Any) -> Callable[[World], object]:
    return _register("loop", condition=lambda s: False, **options)


def _map(**options: Any) -> Callable[[World], object]:
    return _register("map", **{"items": "docs", **options})


def _duplicate(w: World) -> object:
    w.definition.node(name="step")(_fn)
    return w.definition.node(name="step")(_fn)


def _graph(*edges: tuple[str, tuple[str, ...]], writes: dict[str, tuple[str, ...]] | None = None) -> Callable:
    """A workflow of nodes (name, after) on the world's store, run with {}."""

    def run(w: World) -> object:
        flow = dnb.Workflow("graph", store=w.url)
        for name, after in edges:
            flow.node(name=name, after=list(after), writes=(writes or {}).get(name, ()), retry_count=0)(_fn)
        return flow.run({})

    return run


def _notebook_run(**arguments: Callable[[Path], Any] | Any) -> Callable[[World], object]:
    """run-notebook of a one-cell notebook in the world's folder on its store; a callable argument is
    made from that folder (a FIFO, a socket, another notebook). The cell would write MARKER."""

    def run(w: World) -> object:
        import nbformat

        from durable_nb.headless import run_notebook

        notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("open('MARKER', 'w')")])
        nbformat.write(notebook, str(w.root / "echo.ipynb"))
        given = {name: value(w.root) if callable(value) else value for name, value in arguments.items()}
        return run_notebook(given.pop("path", w.root / "echo.ipynb"), **{"store": w.url, **given})

    return run


def _fifo(root: Path) -> Path:
    os.mkfifo(root / "pipe")
    return root / "pipe"


def _socket_file(root: Path) -> Path:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as bound:
        bound.bind(str(root / "s.sock"))  # the socket file stays after the socket is closed
    return root / "s.sock"


def _file(name: str, data: bytes) -> Callable[[Path], Path]:
    def make(root: Path) -> Path:
        (root / name).write_bytes(data)
        return root / name

    return make


def _parameters_file(text: str) -> Callable[[World], object]:
    """Read a parameters file of ``text`` as run-notebook -f does."""

    def read(w: World) -> object:
        from durable_nb.headless.inputs import read_parameters_file

        return read_parameters_file(_file("params.yaml", text.encode())(w.root))

    return read


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def _self_containing() -> list[Any]:
    value: list[Any] = []
    value.append(value)
    return value


_EMPTY_NOTEBOOK = b'{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'
_ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{before}'] * 10)}]\n" for before, name in zip("abcde", "bcdef", strict=True)
)


# -- 1. refused before anything is stored -------------------------------------------------------------

NOTHING_STORED = [
    # Workflow()
    case("workflow-name-empty", lambda w: dnb.Workflow(""), dnb.ConfigurationError, "non-empty name"),
    case("workflow-name-blank", lambda w: dnb.Workflow("   "), dnb.ConfigurationError, "non-empty name"),
    case("workflow-name-not-text", lambda w: dnb.Workflow(5), dnb.ConfigurationError, "non-empty name"),  # type: ignore[arg-type]
    # node registration
    case("node-after-int", _register("node", after=5), dnb.ConfigurationError, "after="),
    case("node-after-list-with-int", _register("node", after=["load", 5]), dnb.ConfigurationError, "after="),
    case("node-after-list-with-none", _register("node", after=[None]), dnb.ConfigurationError, "after="),
    case("node-retry-count-negative", _register("node", retry_count=-1), dnb.ConfigurationError, "retry_count"),
    case("node-retry-count-bool", _register("node", retry_count=True), dnb.ConfigurationError, "retry_count"),
    case("node-retry-count-text", _register("node", retry_count="2"), dnb.ConfigurationError, "retry_count"),
    case("node-retry-count-float", _register("node", retry_count=1.5), dnb.ConfigurationError, "retry_count"),
    case("node-timeout-zero", _register("node", timeout_seconds=0), dnb.ConfigurationError, "timeout_seconds"),
    case("node-timeout-negative", _register("node", timeout_seconds=-1), dnb.ConfigurationError, "timeout_seconds"),
    case("node-timeout-nan", _register("node", timeout_seconds=math.nan), dnb.ConfigurationError, "timeout_seconds"),
    case("node-timeout-inf", _register("node", timeout_seconds=math.inf), dnb.ConfigurationError, "timeout_seconds"),
    case("node-timeout-text", _register("node", timeout_seconds="10"), dnb.ConfigurationError, "timeout_seconds"),
    case("node-timeout-bool", _register("node", timeout_seconds=True), dnb.ConfigurationError, "timeout_seconds"),
    case("node-not-callable", lambda w: w.definition.node(5), dnb.ConfigurationError, "registers functions"),
    case("node-decorating-non-function", lambda w: w.definition.node()("text"), dnb.ConfigurationError, "functions"),
    case("node-name-not-text", _register("node", name=5), dnb.ConfigurationError, "name"),
    case("node-writes-int", _register("node", writes=5), dnb.ConfigurationError, "writes"),
    case("node-duplicate-name", _duplicate, dnb.ConfigurationError, "already has a node 'step'"),
    # loop, map and switch registration
    case("loop-condition-not-callable", _register("loop", condition=5), dnb.ConfigurationError, "condition="),
    case("loop-max-iterations-zero", _loop(max_iterations=0), dnb.ConfigurationError, "max_iterations"),
    case("loop-max-iterations-negative", _loop(max_iterations=-1), dnb.ConfigurationError, "max_iterations"),
    case("loop-max-iterations-bool", _loop(max_iterations=True), dnb.ConfigurationError, "max_iterations"),
    case("loop-max-iterations-float", _loop(max_iterations=2.5), dnb.ConfigurationError, "max_iterations"),
    case("loop-retry-count-negative", _loop(retry_count=-1), dnb.ConfigurationError, "retry_count"),
    case("loop-timeout-nan", _loop(timeout_seconds=math.nan), dnb.ConfigurationError, "timeout_seconds"),
    case("map-items-int", _register("map", items=5), dnb.ConfigurationError, "items="),
    case("map-items-none", _register("map", items=None), dnb.ConfigurationError, "items="),
    case("map-max-concurrency-zero", _map(max_concurrency=0), dnb.ConfigurationError, "max_concurrency"),
    case("map-max-concurrency-negative", _map(max_concurrency=-2), dnb.ConfigurationError, "max_concurrency"),
    case("map-max-concurrency-bool", _map(max_concurrency=True), dnb.ConfigurationError, "max_concurrency"),
    case("map-max-concurrency-text", _map(max_concurrency="4"), dnb.ConfigurationError, "max_concurrency"),
    case("map-into-not-text", _map(into=5), dnb.ConfigurationError, "into"),
    case("map-timeout-inf", _map(timeout_seconds=math.inf), dnb.ConfigurationError, "timeout_seconds"),
    case("map-retry-count-text", _map(retry_count="1"), dnb.ConfigurationError, "retry_count"),
    case("switch-branches-int", _register("switch", branches=5), dnb.ConfigurationError, "branches"),
    case("switch-branches-list", _register("switch", branches=["a"]), dnb.ConfigurationError, "branches"),
    # the graph, checked when a run starts: nothing is stored
    case("graph-unknown-dependency", _graph(("a", ("missing",))), dnb.ConfigurationError, "does not define"),
    case("graph-cycle", _graph(("a", ("b",)), ("b", ("a",))), dnb.ConfigurationError, "cycle"),
    case("graph-self-cycle", _graph(("a", ("a",))), dnb.ConfigurationError, "cycle"),
    case(
        "graph-wave-writes-clash",
        _graph(("a", ()), ("b", ()), writes={"a": ("k",), "b": ("k",)}),
        dnb.ConfigurationError,
        "both write ['k']",
    ),
    # gates outside a node, and bad gate arguments
    case("gate-outside-node", lambda w: dnb.gate("publish"), dnb.NoActiveNode, "outside a durable node"),
    case("interrupt-outside-node", lambda w: dnb.interrupt("more?"), dnb.NoActiveNode, "outside a durable node"),
    case("gate-timeout-nan", lambda w: dnb.gate("g", timeout_seconds=math.nan), dnb.InvalidInput, "timeout_seconds"),
    case("gate-timeout-text", lambda w: dnb.gate("g", timeout_seconds="10"), dnb.InvalidInput, "timeout_seconds"),
    case("gate-timeout-below-floor", lambda w: dnb.gate("g", timeout_seconds=0.5), dnb.InvalidInput, "1 second"),
    case("gate-timeout-negative", lambda w: dnb.gate("g", timeout_seconds=-1), dnb.InvalidInput, "1 second"),
    case("gate-on-timeout-maybe", lambda w: dnb.gate("g", on_timeout="maybe"), dnb.InvalidInput, "on_timeout"),
    case("gate-name-empty", lambda w: dnb.gate(""), dnb.InvalidInput, "non-empty name"),
    case("interrupt-on-timeout-bogus", lambda w: dnb.interrupt("r", on_timeout="x"), dnb.InvalidInput, "on_timeout"),
    # run input
    case("run-input-list", lambda w: w.simple().run([1, 2]), dnb.InvalidState, "must be a dict"),
    case("run-input-text", lambda w: w.simple().run("abc"), dnb.InvalidState, "must be a dict"),
    case("run-input-int", lambda w: w.simple().run(42), dnb.InvalidState, "must be a dict"),
    case("run-input-int-keys", lambda w: w.simple().run({1: "x"}), dnb.InvalidState, "not strings"),
    case("run-input-reserved-loop-counter", lambda w: w.simple().run({"__loop_x": -50}), dnb.InvalidState, "reserved"),
    case("run-input-reserved-map-item", lambda w: w.simple().run({"__map_m/0": 1}), dnb.InvalidState, "reserved"),
    case("run-input-dunder-name", lambda w: w.simple().run({"__x": 1}), dnb.InvalidState, "'__'"),
    case(
        "run-input-open-file",
        lambda w: w.simple().run({"f": w.open_file()}),
        dnb.SerializationError,
        "cannot serialize 'f'",
    ),
    case(
        "idempotency-key-empty",
        lambda w: w.simple().run({}, idempotency_key=""),
        dnb.InvalidInput,
        "idempotency_key",
    ),
    case(
        "idempotency-key-int",
        lambda w: w.simple().run({}, idempotency_key=5),
        dnb.InvalidInput,
        "idempotency_key",
    ),
    # run-notebook, before any kernel starts: names, parameters and paths it cannot use
    case(
        "run-notebook-parameter-keyword",
        _notebook_run(parameters={"class": 1}),
        dnb.InvalidNotebookRun,
        "not a keyword",
    ),
    case(
        "run-notebook-parameter-none",
        _notebook_run(parameters={"None": 1}),
        dnb.InvalidNotebookRun,
        "not a keyword",
    ),
    case(
        "run-notebook-parameter-name-with-equals", _notebook_run(parameters={"a=b": 1}), dnb.InvalidNotebookRun, "'a=b'"
    ),
    case("run-notebook-parameter-name-dunder", _notebook_run(parameters={"__x": 1}), dnb.InvalidNotebookRun, "'__x'"),
    case(
        "run-notebook-parameter-name-int",
        _notebook_run(parameters={1: 1}),
        dnb.InvalidNotebookRun,
        "cannot be assigned",
    ),
    case("run-notebook-parameter-set", _notebook_run(parameters={"x": {"a"}}), dnb.InvalidNotebookRun, "type set"),
    case("run-notebook-parameter-bytes", _notebook_run(parameters={"x": b"a"}), dnb.InvalidNotebookRun, "type bytes"),
    case(
        "run-notebook-parameter-tuple-inside",
        _notebook_run(parameters={"x": [(1, 2)]}),
        dnb.InvalidNotebookRun,
        "type tuple",
    ),
    case(
        "run-notebook-parameter-object-key",
        _notebook_run(parameters={"x": {(1,): 1}}),
        dnb.InvalidNotebookRun,
        "key of type tuple",
    ),
    case(
        "run-notebook-parameter-lone-surrogate",
        _notebook_run(parameters={"x": "\udcff"}),
        dnb.InvalidNotebookRun,
        "not valid unicode",
    ),
    case(
        "run-notebook-parameter-too-deep",
        _notebook_run(parameters={"x": _nested(100)}),
        dnb.InvalidNotebookRun,
        "levels of nesting",
    ),
    case(
        "run-notebook-parameter-cycle",
        _notebook_run(parameters={"x": _self_containing()}),
        dnb.InvalidNotebookRun,
        "more than",
    ),
    case(
        "run-notebook-run-name-newline",
        _notebook_run(run="x\nopen('MARKER','w') #"),
        dnb.InvalidNotebookRun,
        "control characters",
    ),
    case(
        "run-notebook-run-name-escape",
        _notebook_run(run="\x1b]0;title\x07"),
        dnb.InvalidNotebookRun,
        "control characters",
    ),
    case("run-notebook-run-name-empty", _notebook_run(run=""), dnb.InvalidNotebookRun, "cannot be empty"),
    case(
        "run-notebook-file-name-newline",
        _notebook_run(path=_file("nb\nopen('MARKER','w') #.ipynb", _EMPTY_NOTEBOOK)),
        dnb.InvalidNotebookRun,
        "--run NAME",
    ),
    case(
        "run-notebook-store-in-memory", _notebook_run(store="sqlite:///:memory:"), dnb.InvalidNotebookRun, "in-memory"
    ),
    case(
        "run-notebook-path-missing",
        _notebook_run(path=lambda root: root / "none.ipynb"),
        dnb.InvalidNotebookRun,
        "no such file",
    ),
    case("run-notebook-path-folder", _notebook_run(path=lambda root: root), dnb.InvalidNotebookRun, "is a folder"),
    case("run-notebook-path-fifo", _notebook_run(path=_fifo), dnb.InvalidNotebookRun, "is a fifo"),
    case("run-notebook-path-socket", _notebook_run(path=_socket_file), dnb.InvalidNotebookRun, "is a socket"),
    case("run-notebook-path-dev-zero", _notebook_run(path="/dev/zero"), dnb.InvalidNotebookRun, "character device"),
    case(
        "run-notebook-path-json-list",
        _notebook_run(path=_file("list.ipynb", b"[]")),
        dnb.InvalidNotebookRun,
        "save it from jupyter",
    ),
    case(
        "run-notebook-path-not-utf8",
        _notebook_run(path=_file("latin.ipynb", b"\xe9")),
        dnb.InvalidNotebookRun,
        "not utf-8",
    ),
    case("run-notebook-output-folder", _notebook_run(output=lambda root: root), dnb.InvalidNotebookRun, "is a folder"),
    case("run-notebook-output-fifo", _notebook_run(output=_fifo), dnb.InvalidNotebookRun, "is a fifo"),
    case(
        "run-notebook-output-folder-missing",
        _notebook_run(output=lambda root: root / "none" / "out.ipynb"),
        dnb.InvalidNotebookRun,
        "does not exist",
    ),
    case(
        "parameters-file-python-tag",
        _parameters_file("x: !!python/name:os.system\n"),
        dnb.InvalidNotebookRun,
        "!!python",
    ),
    case("parameters-file-set-tag", _parameters_file("x: !!set {a: null}\n"), dnb.InvalidNotebookRun, "type set"),
    case("parameters-file-binary-tag", _parameters_file("x: !!binary aGk=\n"), dnb.InvalidNotebookRun, "type bytes"),
    case(
        "parameters-file-timestamp-tag",
        _parameters_file("x: !!timestamp 2026-01-02\n"),
        dnb.InvalidNotebookRun,
        "type date",
    ),
    case("parameters-file-omap-tag", _parameters_file("x: !!omap [a: 1]\n"), dnb.InvalidNotebookRun, "type tuple"),
    case("parameters-file-alias-bomb", _parameters_file(_ALIAS_BOMB), dnb.InvalidNotebookRun, "more than"),
    case("parameters-file-not-a-mapping", _parameters_file("- a\n- b\n"), dnb.InvalidNotebookRun, "mapping of names"),
    case("parameters-file-not-yaml", _parameters_file("x: [unclosed\n"), dnb.InvalidNotebookRun, "not plain yaml"),
]


def _answer(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    return "an answer"


def _find(query: str) -> str:
    """Find something."""
    return query


def _unsent_openai_client() -> Any:
    """A real openai client whose requests would go nowhere: the cases are refused before any is sent."""
    import openai

    return openai.OpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1", max_retries=0)


def _agent(**arguments: Any) -> Callable[[World], object]:
    """dnb.agent as a run of its own on the world's store, with ``arguments`` over ones that work."""

    def call(w: World) -> object:
        given = {"client": _answer, "messages": "Find it.", "tools": [_find], "store": w.url, "run_key": "k"}
        given.update(arguments)
        if given["client"] == "openai":
            given["client"] = _unsent_openai_client()
        return dnb.agent(**given)

    return call


# dnb.agent outside any node: its arguments are checked before its run is created
NOTHING_STORED += [
    case("agent-tools-one-function", _agent(tools=_find), dnb.ConfigurationError, "pass tools=[_find]"),
    case("agent-tools-text", _agent(tools="_find"), dnb.ConfigurationError, "list of functions"),
    case("agent-tools-dict", _agent(tools={"find": _find}), dnb.ConfigurationError, "list of functions"),
    case("agent-tools-list-with-int", _agent(tools=[_find, 5]), dnb.ConfigurationError, "a function"),
    case("agent-messages-int", _agent(messages=5), dnb.InvalidInput, "messages= takes text"),
    case("agent-messages-none", _agent(messages=None), dnb.InvalidInput, "messages= takes text"),
    case("agent-messages-empty-list", _agent(messages=[]), dnb.InvalidInput, "non-empty list"),
    case("agent-messages-list-of-text", _agent(messages=["hi"]), dnb.InvalidInput, "holding 'hi'"),
    case("agent-messages-without-role", _agent(messages=[{"content": "hi"}]), dnb.InvalidInput, "'role'"),
    case("agent-system-int", _agent(system=5), dnb.InvalidInput, "system= takes the system prompt"),
    case("agent-max-turns-zero", _agent(max_turns=0), dnb.ConfigurationError, "max_turns"),
    case("agent-max-turns-bool", _agent(max_turns=True), dnb.ConfigurationError, "max_turns"),
    case("agent-max-turns-text", _agent(max_turns="5"), dnb.ConfigurationError, "max_turns"),
    case("agent-name-empty", _agent(name=""), dnb.ConfigurationError, "name"),
    case("agent-name-with-slash", _agent(name="a/b"), dnb.ConfigurationError, "without '/'"),
    case("agent-client-int", _agent(client=5), dnb.ConfigurationError, "client="),
    case("agent-option-to-a-function", _agent(temperature=0), dnb.ConfigurationError, "SDK client"),
    case("agent-openai-without-model", _agent(client="openai"), dnb.ConfigurationError, "model="),
    case(
        "agent-openai-misspelt-option",
        _agent(client="openai", model="m", temprature=0),
        dnb.ConfigurationError,
        "no option 'temprature'",
    ),
    case("agent-openai-stream", _agent(client="openai", model="m", stream=True), dnb.ConfigurationError, "stream="),
    case("agent-run-key-empty", _agent(run_key=""), dnb.InvalidInput, "run_key="),
    case("agent-run-key-int", _agent(run_key=5), dnb.InvalidInput, "run_key="),
    case("agent-run-key-and-run-id", _agent(run_id="r"), dnb.ConfigurationError, "not both"),
    case("agent-run-id-unknown", _agent(run_key=None, run_id="no-such-run"), dnb.RunNotFound, "no run with id"),
    case("agent-run-id-empty", _agent(run_key=None, run_id=""), dnb.InvalidInput, "run id"),
    # dnb.worker: checked when it is made, not when the supervisor's model first calls it
    case(
        "worker-tools-one-function",
        lambda w: dnb.worker(_answer, _find, name="w", description="Finds."),
        dnb.ConfigurationError,
        "pass tools=[_find]",
    ),
    case(
        "worker-max-turns-zero",
        lambda w: dnb.worker(_answer, [_find], name="w", description="Finds.", max_turns=0),
        dnb.ConfigurationError,
        "max_turns",
    ),
    case(
        "worker-client-int",
        lambda w: dnb.worker(5, [_find], name="w", description="Finds."),
        dnb.ConfigurationError,
        "client=",
    ),
]


@pytest.mark.parametrize(("call", "error", "fragment"), NOTHING_STORED)
def test_refused_before_anything_is_stored(
    tmp_path: Path, call: Callable[[World], object], error: ErrorType, fragment: str
) -> None:
    """The call raises the typed error with its advice; a refused registration adds no node (only the
    first 'step' of the duplicate case is there) and the store holds no run."""
    w = World(tmp_path / "store")
    try:
        _check(_raised(lambda: call(w)), error, fragment)
        assert w.definition.nodes in ([], ["step"])
        assert _run_count(w.url) == 0
    finally:
        w.close()


# -- 2. store URLs and store arguments -------------------------------------------------------------


def _text_file(root: Path) -> str:
    (root / "notes.txt").write_text("not a database\n" * 50)
    return f"sqlite:///{root}/notes.txt"


def _folder(root: Path) -> str:
    (root / "runs.db").mkdir()
    (root / "runs.db" / "keep.txt").write_text("mine")
    return f"sqlite:///{root}/runs.db"


def _foreign(root: Path) -> str:
    with closing(sqlite3.connect(root / "app.db")) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO customers (name) VALUES ('ada')")
        conn.commit()
    return f"sqlite:///{root}/app.db"


def _under_file(root: Path) -> str:
    (root / "plain").write_text("x")
    return f"sqlite:///{root}/plain/runs.db"


def _new_file(root: Path) -> str:
    return f"sqlite:///{root}/runs.db"


def _in_missing_folder(root: Path) -> str:
    return f"sqlite:///{root}/nonexistent/dir/x.db"


def _empty_file(root: Path) -> str:
    (root / "runs.db").touch()
    return f"sqlite:///{root}/runs.db"


def _unit_flow(store: Any) -> dnb.Workflow:
    flow = dnb.Workflow("w", store=store)
    flow.node(retry_count=0)(_fn)
    return flow


def url_case(
    case_id: str, setup: Callable[[Path], Any], call: Callable[[Any], object], error: ErrorType, fragment: str
) -> Any:
    return pytest.param(setup, call, error, fragment, id=case_id)


def _given(url: Any) -> Callable[[Path], Any]:
    return lambda root: url


STORE_URLS = [
    url_case("connect-mysql", _given("mysql://x"), dnb.connect, dnb.StoreUnavailable, "sqlite:///"),
    url_case("connect-sqlite-no-path", _given("sqlite://"), dnb.connect, dnb.StoreUnavailable, "sqlite:///"),
    url_case("connect-sqlite-empty-path", _given("sqlite:///"), dnb.connect, dnb.StoreUnavailable, "sqlite:///"),
    url_case("connect-one-slash", _given("sqlite:/x.db"), dnb.connect, dnb.StoreUnavailable, "sqlite:///"),
    url_case("connect-empty-url", _given(""), dnb.connect, dnb.StoreUnavailable, "sqlite:///"),
    url_case("connect-bare-text-name", _given("runs.txt"), dnb.connect, dnb.StoreUnavailable, "sqlite:///"),
    url_case(
        "connect-sqlite-directory",
        _folder,
        lambda url: dnb.runs(store=dnb.connect(url)),
        dnb.StoreUnavailable,
        "cannot open the sqlite store",
    ),
    url_case(
        "connect-text-file",
        _text_file,
        lambda url: dnb.runs(store=dnb.connect(url)),
        dnb.StoreUnavailable,
        "not a database",
    ),
    url_case(
        "connect-foreign-sqlite-database",
        _foreign,
        lambda url: dnb.runs(store=dnb.connect(url)),
        dnb.StoreUnavailable,
        "did not create",
    ),
    url_case(
        "connect-path-under-a-file",
        _under_file,
        lambda url: _unit_flow(url).run({}),
        dnb.StoreUnavailable,
        "cannot open the sqlite store",
    ),
    url_case(
        "connect-durability-bogus",
        _new_file,
        lambda url: dnb.connect(url, durability="bogus"),
        dnb.InvalidInput,
        "durability",
    ),
    url_case(
        "connect-durability-none",
        _new_file,
        lambda url: dnb.connect(url, durability=None),
        dnb.InvalidInput,
        "durability",
    ),
    url_case("connect-url-int", _given(5), dnb.connect, dnb.InvalidInput, "url"),
    url_case("connect-url-bytes", lambda root: _new_file(root).encode(), dnb.connect, dnb.InvalidInput, "url"),
    url_case(
        "store-argument-int", _given(5), lambda store: dnb.get_run("0192", store=store), dnb.InvalidInput, "store"
    ),
    url_case("store-argument-object", _given(object()), lambda store: dnb.runs(store=store), dnb.InvalidInput, "store"),
    url_case("workflow-store-int", _given(5), lambda store: _unit_flow(store).run({}), dnb.InvalidInput, "store"),
    # Calls that only read or act on stored runs never create the store a mistyped URL names.
    url_case("read-runs-store-missing", _new_file, lambda url: dnb.runs(store=url), dnb.StoreNotFound, "no such file"),
    url_case(
        "read-history-store-in-missing-folder",
        _in_missing_folder,
        lambda url: dnb.history("0192", store=url),
        dnb.StoreNotFound,
        "nonexistent/dir/x.db",
    ),
    url_case(
        "read-get-run-store-empty-file",
        _empty_file,
        lambda url: dnb.get_run("0192", store=url),
        dnb.StoreNotFound,
        "holds no durable_nb store",
    ),
    url_case(
        "read-approve-store-missing",
        _new_file,
        lambda url: dnb.approve("0192", store=url),
        dnb.StoreNotFound,
        "start a run",
    ),
    url_case(
        "read-fork-store-missing", _new_file, lambda url: dnb.fork("0192", store=url), dnb.StoreNotFound, "no such file"
    ),
    url_case(
        "read-events-store-connected-without-create",
        _in_missing_folder,
        lambda url: dnb.events("0192", store=dnb.connect(url, create=False)),
        dnb.StoreNotFound,
        "check the store url",
    ),
    url_case(
        "workflow-store-mysql",
        _given("mysql://x"),
        lambda store: _unit_flow(store).run({}),
        dnb.StoreUnavailable,
        "sqlite:///",
    ),
]


@pytest.mark.parametrize(("setup", "call", "error", "fragment"), STORE_URLS)
def test_refused_store_url(
    tmp_path: Path, setup: Callable[[Path], Any], call: Callable[[Any], object], error: ErrorType, fragment: str
) -> None:
    """A URL or store argument that names no durable_nb store is refused, and nothing on disk changes (no
    database, journal or key created beside it, the file or folder it names left as it was)."""
    root = tmp_path / "disk"
    root.mkdir()
    url = setup(root)
    before = _disk(root)
    _check(_raised(lambda: call(url)), error, fragment)
    assert _disk(root) == before
    _raised(lambda: call(url))  # trying again changes nothing either
    assert _disk(root) == before


# -- 3. refused calls on stored runs ------------------------------------------------------------------


def _async(make: Callable[[World], Any]) -> Callable[[World], object]:
    return lambda w: asyncio.run(make(w))


INTACT = [
    # flow.fork
    case(
        "flow-fork-state-reserved-loop-counter",
        lambda w: w.plain.fork(w.done.id, state={"__loop_total": 1}),
        dnb.InvalidState,
        "reserved",
    ),
    case("flow-fork-state-dunder", lambda w: w.plain.fork(w.done.id, state={"__x": 1}), dnb.InvalidState, "'__'"),
    case("flow-fork-state-list", lambda w: w.plain.fork(w.done.id, state=[1]), dnb.InvalidState, "must be a dict"),
    case("flow-fork-state-int-keys", lambda w: w.plain.fork(w.done.id, state={1: 1}), dnb.InvalidState, "not strings"),
    case(
        "flow-fork-state-open-file",
        lambda w: w.plain.fork(w.done.id, state={"x": w.open_file()}),
        dnb.SerializationError,
        "cannot serialize 'x'",
    ),
    case(
        "flow-fork-unknown-checkpoint",
        lambda w: w.plain.fork(w.done.id, checkpoint_id="no-such-checkpoint"),
        dnb.CheckpointNotFound,
        "history(run_id)",
    ),
    case(
        "flow-fork-checkpoint-of-another-run",
        lambda w: w.plain.fork(w.done.id, checkpoint_id=w.checkpoint(w.paused.id, "after:prepare")),
        dnb.CheckpointNotFound,
        "has no checkpoint",
    ),
    case("flow-fork-unknown-run", lambda w: w.plain.fork("no-such-run"), dnb.RunNotFound, "durable_nb.runs()"),
    case("flow-fork-malformed-run-id", lambda w: w.plain.fork(""), dnb.InvalidInput, "run id"),
    case(
        "flow-fork-run-of-another-workflow",
        lambda w: w.plain.fork(w.paused.id, state={"x": 5}),
        dnb.WorkflowMismatch,
        "belongs to workflow 'gated'",
    ),
    # dnb.fork
    case(
        "dnb-fork-state-reserved-loop-counter",
        lambda w: dnb.fork(w.done.id, state={"__loop_total": 1}, store=w.url),
        dnb.InvalidState,
        "reserved",
    ),
    case(
        "dnb-fork-state-reserved-map-item",
        lambda w: dnb.fork(w.done.id, state={"__map_m/0": 1}, store=w.url),
        dnb.InvalidState,
        "reserved",
    ),
    case("dnb-fork-state-text", lambda w: dnb.fork(w.done.id, state="x=1", store=w.url), dnb.InvalidState, "dict"),
    case("dnb-fork-state-list", lambda w: dnb.fork(w.done.id, state=[("x", 1)], store=w.url), dnb.InvalidState, "dict"),
    case(
        "dnb-fork-state-int-keys",
        lambda w: dnb.fork(w.done.id, state={1: "x"}, store=w.url),
        dnb.InvalidState,
        "not strings",
    ),
    case(
        "dnb-fork-state-open-file",
        lambda w: dnb.fork(w.done.id, state={"x": w.open_file()}, store=w.url),
        dnb.SerializationError,
        "cannot serialize 'x'",
    ),
    case(
        "dnb-fork-unknown-checkpoint",
        lambda w: dnb.fork(w.done.id, "no-such-checkpoint", store=w.url),
        dnb.CheckpointNotFound,
        "history(run_id)",
    ),
    case(
        "dnb-fork-checkpoint-id-int",
        lambda w: dnb.fork(w.done.id, 5, store=w.url),
        (dnb.CheckpointNotFound, dnb.InvalidInput),
        "checkpoint",
    ),
    case("dnb-fork-unknown-run", lambda w: dnb.fork("no-such-run", store=w.url), dnb.RunNotFound, "no run with id"),
    case("dnb-fork-run-id-none", lambda w: dnb.fork(None, store=w.url), dnb.InvalidInput, "run id"),
    case(
        "afork-state-reserved",
        _async(lambda w: dnb.afork(w.done.id, state={"__x": 1}, store=w.url)),
        dnb.InvalidState,
        "reserved",
    ),
    # resume
    case("resume-completed-run", lambda w: w.plain.resume(w.done.id), dnb.AlreadyResumed, "fork it"),
    case("resume-unknown-run", lambda w: w.plain.resume("no-such-run"), dnb.RunNotFound, "durable_nb.runs()"),
    case("resume-malformed-run-id", lambda w: w.plain.resume(""), dnb.InvalidInput, "run id"),
    case(
        "resume-value-on-completed-run",
        lambda w: w.plain.resume(w.done.id, dnb.Resume(1)),
        dnb.InvalidInput,
        "not waiting for a Resume value",
    ),
    case(
        "resume-value-on-failed-run",
        lambda w: w.broken.resume(w.failed.id, dnb.Resume("x")),
        dnb.InvalidInput,
        "not waiting for a Resume value",
    ),
    case("resume-paused-run-undecided", lambda w: w.gated.resume(w.paused.id), dnb.NotResumable, "approve"),
    case(
        "resume-run-of-another-workflow",
        lambda w: w.plain.resume(w.failed.id),
        dnb.WorkflowMismatch,
        "belongs to workflow 'broken'",
    ),
    # approve / reject
    case(
        "approve-value-huge-int",
        lambda w: dnb.approve(w.paused.id, value=10**5000, store=w.url),
        dnb.InvalidDecision,
        "value",
    ),
    case(
        "approve-value-object",
        lambda w: dnb.approve(w.paused.id, value=object(), store=w.url),
        dnb.InvalidDecision,
        "JSON",
    ),
    case(
        "approve-value-reserved-name",
        lambda w: dnb.approve(w.paused.id, value={"__x": 1}, store=w.url),
        dnb.InvalidDecision,
        "reserved",
    ),
    case(
        "approve-value-nan",
        lambda w: dnb.approve(w.paused.id, value=math.nan, store=w.url),
        dnb.InvalidDecision,
        "JSON",
    ),
    case(
        "approve-value-int-keys",
        lambda w: dnb.approve(w.paused.id, value={1: "a"}, store=w.url),
        dnb.InvalidDecision,
        "text keys",
    ),
    case(
        "approve-value-too-large",
        lambda w: dnb.approve(w.paused.id, value="x" * (2 << 20), store=w.url),
        dnb.InvalidDecision,
        "limit",
    ),
    case(
        "approve-comment-int",
        lambda w: dnb.approve(w.paused.id, comment=5, store=w.url),
        dnb.InvalidDecision,
        "comment",
    ),
    case("approve-by-int", lambda w: dnb.approve(w.paused.id, by=5, store=w.url), dnb.InvalidDecision, "by must"),
    case(
        "approve-unknown-node",
        lambda w: dnb.approve(w.paused.id, node="nowhere", store=w.url),
        dnb.UnknownGate,
        "no gate waiting at node 'nowhere'; it waits at node 'review'",
    ),
    case(
        "approve-node-without-gate",
        lambda w: dnb.approve(w.paused.id, node="prepare", store=w.url),
        dnb.UnknownGate,
        "no gate waiting at node 'prepare'",
    ),
    case(
        "flow-reject-unknown-node",
        lambda w: w.gated.reject(w.paused.id, node="nowhere"),
        dnb.UnknownGate,
        "it waits at node 'review'",
    ),
    case("approve-node-int", lambda w: dnb.approve(w.paused.id, node=5, store=w.url), dnb.InvalidInput, "node"),
    case(
        "approve-completed-run",
        lambda w: dnb.approve(w.done.id, store=w.url),
        dnb.AlreadyResumed,
        "no gate left to decide",
    ),
    case(
        "approve-failed-run",
        lambda w: dnb.approve(w.failed.id, store=w.url),
        dnb.AlreadyResumed,
        "not paused at a gate",
    ),
    case("approve-unknown-run", lambda w: dnb.approve("no-such-run", store=w.url), dnb.RunNotFound, "no run with id"),
    case("approve-run-id-none", lambda w: dnb.approve(None, store=w.url), dnb.InvalidInput, "run id"),
    case(
        "reject-value-object",
        lambda w: dnb.reject(w.paused.id, value={1, 2}, store=w.url),
        dnb.InvalidDecision,
        "JSON",
    ),
    case(
        "reject-comment-int",
        lambda w: dnb.reject(w.paused.id, comment=["no"], store=w.url),
        dnb.InvalidDecision,
        "comment",
    ),
    case(
        "reject-completed-run",
        lambda w: dnb.reject(w.done.id, store=w.url),
        dnb.AlreadyResumed,
        "no gate left to decide",
    ),
    case(
        "flow-approve-approved-not-bool",
        lambda w: w.gated.approve(w.paused.id, approved="yes"),
        dnb.InvalidDecision,
        "True or False",
    ),
    case(
        "flow-approve-value-huge-int",
        lambda w: w.gated.approve(w.paused.id, value=10**5000),
        dnb.InvalidDecision,
        "value",
    ),
    case("flow-reject-by-int", lambda w: w.gated.reject(w.paused.id, by=5), dnb.InvalidDecision, "by must"),
    case(
        "flow-approve-run-of-another-workflow",
        lambda w: w.plain.approve(w.paused.id),
        dnb.WorkflowMismatch,
        "belongs to workflow 'gated'",
    ),
    case(
        "aapprove-comment-int",
        _async(lambda w: dnb.aapprove(w.paused.id, comment=5, store=w.url)),
        dnb.InvalidDecision,
        "comment",
    ),
    # idempotency keys
    case(
        "idempotency-key-reused-with-other-input",
        lambda w: w.gated.run({"x": 3}, idempotency_key="paused-key"),
        dnb.IdempotencyKeyReused,
        "send the same input to get that run back, or use a new key",
    ),
    case(
        "idempotency-key-reused-by-start",
        lambda w: w.gated.start({}, idempotency_key="paused-key"),
        dnb.IdempotencyKeyReused,
        "already started run",
    ),
    # cancel
    case("cancel-completed-run", lambda w: dnb.cancel(w.done.id, store=w.url), dnb.NotCancellable, "already completed"),
    case("cancel-failed-run", lambda w: dnb.cancel(w.failed.id, store=w.url), dnb.NotCancellable, "already failed"),
    case("cancel-unknown-run", lambda w: dnb.cancel("no-such-run", store=w.url), dnb.RunNotFound, "no run with id"),
    case("cancel-malformed-run-id", lambda w: dnb.cancel("", store=w.url), dnb.InvalidInput, "run id"),
    case("flow-cancel-completed-run", lambda w: w.plain.cancel(w.done.id), dnb.NotCancellable, "already completed"),
    # prune and runs
    case("prune-negative-age", lambda w: dnb.prune(-1, store=w.url), dnb.InvalidInput, "older_than"),
    case("prune-age-as-text", lambda w: dnb.prune("30d", store=w.url), dnb.InvalidInput, "older_than"),
    case("runs-name-not-text", lambda w: dnb.runs(5, store=w.url), dnb.InvalidInput, "name"),
    # compare
    case(
        "compare-unknown-value-name",
        lambda w: dnb.compare([w.done.id], ["no_such_value"], store=w.url),
        dnb.InvalidInput,
        "no_such_value",
    ),
    case(
        "compare-unknown-run",
        lambda w: dnb.compare([w.done.id, "no-such-run"], store=w.url),
        dnb.RunNotFound,
        "no-such-run",
    ),
    case("compare-run-ids-int", lambda w: dnb.compare(5, store=w.url), dnb.InvalidInput, "run"),
    case("compare-run-id-none", lambda w: dnb.compare([w.done.id, None], store=w.url), dnb.InvalidInput, "run id"),
    case("compare-names-int", lambda w: dnb.compare([w.done.id], 5, store=w.url), dnb.InvalidInput, "name"),
    # a LangGraph config naming a thread no store holds: the stores looked in are named
    case(
        "history-config-unknown-thread",
        lambda w: dnb.history({"configurable": {"thread_id": "no-such-thread"}}),
        dnb.RunNotFound,
        "langgraph thread 'no-such-thread'",
    ),
    case(
        "inspect-config-unknown-thread",
        lambda w: dnb.inspect({"configurable": {"thread_id": "no-such-thread"}}, store=w.url),
        dnb.RunNotFound,
        "langgraph thread 'no-such-thread'",
    ),
    # flow.status / flow.get
    case("flow-status-unknown-run", lambda w: w.plain.status("no-such-run"), dnb.RunNotFound, "no run with id"),
    case("flow-get-malformed-run-id", lambda w: w.plain.get(None), dnb.InvalidInput, "run id"),
]

# Views and lookups by run id: an unknown id is RunNotFound, a malformed one InvalidInput.
_LOOKUPS: dict[str, Callable[..., object]] = {
    "history": dnb.history,
    "status": dnb.status,
    "get-run": dnb.get_run,
    "events": dnb.events,
    "forks": dnb.forks,
    "views-status": durable_nb.views.status,
}
_RUN_IDS: list[tuple[str, Any, ErrorType, str]] = [
    ("unknown-id", "no-such-run", dnb.RunNotFound, "no run with id 'no-such-run'"),
    ("path-like-id", "../x", dnb.RunNotFound, "no run with id '../x'"),
    ("empty-id", "", dnb.InvalidInput, "run id"),
    ("int-id", 5, dnb.InvalidInput, "run id"),
    ("none-id", None, dnb.InvalidInput, "run id"),
]
INTACT += [
    case(
        f"{name}-{label}",
        lambda w, fn=fn, bad=bad: fn(bad, store=w.url),
        error,
        fragment,
    )
    for name, fn in _LOOKUPS.items()
    for label, bad, error, fragment in _RUN_IDS
]


# dnb.agent(run_id=...) names a run that is not one of this agent's
INTACT += [
    case(
        "agent-run-id-of-a-workflow-run",
        lambda w: dnb.agent(_answer, "Find it.", store=w.url, run_id=w.failed.id),
        dnb.WorkflowMismatch,
        "resume it with that workflow",
    ),
]


@pytest.mark.parametrize(("call", "error", "fragment"), INTACT)
def test_refused_call_leaves_store_intact(
    world: World, call: Callable[[World], object], error: ErrorType, fragment: str
) -> None:
    """The call raises the typed error with its advice; every stored run, checkpoint, gate and row is as
    it was (no fork left behind, no gate claimed, no status changed)."""
    world.build()
    before = world.picture()
    _check(_raised(lambda: call(world)), error, fragment)
    after = world.picture()
    assert after["runs"] == before["runs"]  # no new run, no status changed
    assert after["steps"] == before["steps"]
    assert after["gate"] == before["gate"]
    assert after["rows"] == before["rows"]
    assert dnb.get_run(world.done.id, store=world.url).state == {"x": 1, "rows": [1, 2, 3], "total": 6}


# -- 4. bad values handed back by a node: the run fails, the failure is stored ---------------------------


def _load(flow: dnb.Workflow) -> None:
    @flow.node(retry_count=0)
    def load(state: dict[str, Any]) -> dict[str, Any]:
        return {"docs": 5, "loaded": True}


def _map_over_int(flow: dnb.Workflow) -> None:
    _load(flow)
    flow.map(after="load", items="docs", retry_count=0, name="each")(lambda state, doc: doc)


def _map_over_missing(flow: dnb.Workflow) -> None:
    _load(flow)
    flow.map(after="load", items="pages", retry_count=0, name="per_page")(lambda state, page: page)


def _map_callable_int(flow: dnb.Workflow) -> None:
    _load(flow)
    flow.map(after="load", items=lambda s: 7, retry_count=0, name="per_item")(lambda state, item: item)


def _returns(value: Callable[[], Any]) -> Callable[[dnb.Workflow], None]:
    def build(flow: dnb.Workflow) -> None:
        _load(flow)

        @flow.node(after="load", retry_count=0)
        def bad(state: dict[str, Any]) -> Any:
            return value()

    return build


def _switch(choice: Any, branches: dict[str, str] | None = None) -> Callable[[dnb.Workflow], None]:
    def build(flow: dnb.Workflow) -> None:
        _load(flow)

        @flow.switch(after="load", branches=branches)
        def route(state: dict[str, Any]) -> Any:
            return choice

        flow.node(after="route", name="next_step", retry_count=0)(_fn)

    return build


def _gate_in_node(**options: Any) -> Callable[[dnb.Workflow], None]:
    def build(flow: dnb.Workflow) -> None:
        _load(flow)

        @flow.node(after="load", retry_count=0)
        def ask(state: dict[str, Any]) -> dict[str, Any]:
            dnb.gate("publish", {"docs": state["docs"]}, **options)
            return {}

    return build


def _wave_clash(flow: dnb.Workflow) -> None:
    _load(flow)
    flow.node(after="load", name="left", retry_count=0)(lambda s: {"k": 1})
    flow.node(after="load", name="right", retry_count=0)(lambda s: {"k": 2})


_HANDLES: list[IO[str]] = []


def _open_file() -> dict[str, Any]:
    handle = open(__file__)  # closed when the case ends
    _HANDLES.append(handle)
    return {"f": handle}


def _generator() -> Any:
    return {"g": (i for i in range(3))}


FAILED_RUNS = [
    pytest.param(_map_over_int, "each", dnb.InvalidState, ["map", "'docs'", "int"], id="map-items-value-is-int"),
    pytest.param(_map_over_missing, "per_page", dnb.InvalidState, ["map", "'pages'"], id="map-items-value-missing"),
    pytest.param(_map_callable_int, "per_item", dnb.InvalidState, ["map", "int"], id="map-items-callable-returns-int"),
    pytest.param(_returns(lambda: [1, 2]), "bad", dnb.InvalidState, ["must be a dict", "list"], id="node-returns-list"),
    pytest.param(_returns(lambda: "done"), "bad", dnb.InvalidState, ["must be a dict", "str"], id="node-returns-text"),
    pytest.param(_returns(lambda: 42), "bad", dnb.InvalidState, ["must be a dict", "int"], id="node-returns-int"),
    pytest.param(_returns(lambda: {1: "x"}), "bad", dnb.InvalidState, ["not strings"], id="node-returns-int-keys"),
    pytest.param(
        _returns(_open_file),
        "bad",
        dnb.SerializationError,
        ["cannot serialize 'f'", "open file"],
        id="node-returns-open-file",
    ),
    pytest.param(
        _returns(lambda: {"lock": threading.Lock()}),
        "bad",
        dnb.SerializationError,
        ["cannot serialize 'lock'"],
        id="node-returns-lock",
    ),
    pytest.param(
        _returns(_generator), "bad", dnb.SerializationError, ["cannot serialize 'g'"], id="node-returns-generator"
    ),
    pytest.param(
        _switch("nowhere"), "route", dnb.InvalidState, ["switch 'route'", "nowhere"], id="switch-chooses-unknown-node"
    ),
    pytest.param(
        _switch("other", {"main": "next_step"}),
        "route",
        dnb.InvalidState,
        ["switch 'route'", "other"],
        id="switch-chooses-unknown-branch",
    ),
    pytest.param(_switch(5), "route", dnb.InvalidState, ["switch 'route'", "5"], id="switch-returns-int"),
    pytest.param(
        _gate_in_node(timeout_seconds=math.nan),
        "ask",
        dnb.InvalidInput,
        ["timeout_seconds"],
        id="gate-in-node-timeout-nan",
    ),
    pytest.param(
        _gate_in_node(on_timeout="maybe"), "ask", dnb.InvalidInput, ["on_timeout"], id="gate-in-node-on-timeout-maybe"
    ),
    pytest.param(_wave_clash, "right", dnb.ConfigurationError, ["both write ['k']"], id="wave-nodes-write-one-key"),
]


@pytest.mark.parametrize(("build", "node", "error", "fragments"), FAILED_RUNS)
def test_bad_value_fails_the_run(
    tmp_path: Path,
    build: Callable[[dnb.Workflow], None],
    node: str,
    error: type[dnb.DurableError],
    fragments: list[str],
) -> None:
    """The run ends ``failed``; its error names the node and says what was wrong; the failure is stored
    with the error's type; what was committed before (node 'load') is kept, and nothing of the bad node."""
    url = f"sqlite:///{tmp_path}/runs.db"
    try:
        flow = dnb.Workflow("bad-values", store=url)
        build(flow)
        run = flow.run({"x": 1})
        assert run.status == "failed", f"run is {run.status}, error {run.error!r}"
        assert run.error is not None
        text = run.error.lower()
        for fragment in [f"node '{node}' failed", *fragments]:
            assert fragment.lower() in text, f"{fragment!r} not in {run.error!r}"
        history = dnb.history(run.id, store=url)
        failed = history[history["step"] == f"failed:{node}"]
        assert len(failed) == 1, list(history["step"])
        stored_type = str(failed["error_type"].iloc[0])
        assert stored_type == error.__name__, f"stored error type {stored_type}, not {error.__name__}"
        assert issubclass(getattr(dnb, stored_type), dnb.DurableError)
        assert "after:load" in list(history["step"])
        assert f"after:{node}" not in list(history["step"])
        stored = dnb.get_run(run.id, store=url)
        assert stored.status == "failed" and stored.error == run.error
        assert stored.state["loaded"] is True and stored.state["x"] == 1
    finally:
        while _HANDLES:
            _HANDLES.pop().close()
        disconnect(url)


# -- 5. the command line ------------------------------------------------------------------------------

# (argv, exit code, the error's type (None: argparse refused the usage), message fragment)
CLI = [
    pytest.param(["show", "no-such-run"], EXIT_NOT_FOUND, dnb.RunNotFound, "no run with id", id="cli-show-unknown-run"),
    pytest.param(
        ["history", "no-such-run"], EXIT_NOT_FOUND, dnb.RunNotFound, "no run with id", id="cli-history-unknown-run"
    ),
    pytest.param(["history", ""], EXIT_FAILED, dnb.InvalidInput, "run id", id="cli-history-empty-run-id"),
    pytest.param(["show", "{done}", "--last", "-5"], EXIT_USAGE, None, "--last", id="cli-show-last-negative"),
    pytest.param(["show", "{done}", "--last", "0"], EXIT_USAGE, None, "--last", id="cli-show-last-zero"),
    pytest.param(["show", "{done}", "--last", "many"], EXIT_USAGE, None, "whole number", id="cli-show-last-text"),
    pytest.param(["prune", "--older-than", "5x"], EXIT_USAGE, None, "not a duration", id="cli-prune-older-than-5x"),
    pytest.param(
        ["prune", "--older-than", "-3d"], EXIT_USAGE, None, "--older-than", id="cli-prune-older-than-negative"
    ),
    pytest.param(["runs", "--status", "bogus"], EXIT_USAGE, None, "invalid choice", id="cli-runs-status-bogus"),
    pytest.param(["explode"], EXIT_USAGE, None, "invalid choice", id="cli-unknown-command"),
    pytest.param(["show"], EXIT_USAGE, None, "required", id="cli-show-without-run"),
    pytest.param(
        ["fork", "{done}", "--set", 'x="text"'],
        EXIT_FAILED,
        dnb.InvalidInput,
        "x is int",
        id="cli-fork-set-changes-type",
    ),
    pytest.param(
        ["fork", "{done}", "--set", "__loop_x=1"], EXIT_FAILED, dnb.InvalidInput, "reserved", id="cli-fork-set-reserved"
    ),
    pytest.param(
        ["fork", "{done}", "--set", "x=__import__('os')"],
        EXIT_FAILED,
        dnb.InvalidInput,
        "not a python literal",
        id="cli-fork-set-code",
    ),
    pytest.param(
        ["fork", "{done}", "--set", "x"],
        EXIT_FAILED,
        dnb.InvalidInput,
        "name = python literal",
        id="cli-fork-set-no-value",
    ),
    pytest.param(
        ["fork", "{done}", "--at", "no-such-checkpoint"],
        EXIT_FAILED,
        dnb.CheckpointNotFound,
        "has no checkpoint",
        id="cli-fork-unknown-checkpoint",
    ),
    pytest.param(
        ["fork", "no-such-run", "--set", "x=2"],
        EXIT_NOT_FOUND,
        dnb.RunNotFound,
        "no run with id",
        id="cli-fork-unknown-run",
    ),
    pytest.param(
        ["resume", "{failed}", "--workflow", "nomodule:flow"],
        EXIT_FAILED,
        dnb.InvalidInput,
        "cannot import 'nomodule'",
        id="cli-resume-workflow-module-missing",
    ),
    pytest.param(
        ["resume", "{failed}", "--workflow", "nomodule"],
        EXIT_FAILED,
        dnb.InvalidInput,
        "module:attribute",
        id="cli-resume-workflow-without-attribute",
    ),
    pytest.param(
        ["resume", "{failed}", "--workflow", "json:dumps"],
        EXIT_FAILED,
        dnb.InvalidInput,
        "not a durable_nb.workflow",
        id="cli-resume-workflow-not-a-workflow",
    ),
    pytest.param(
        ["recover", "--workflow", "nomodule:flow"],
        EXIT_FAILED,
        dnb.InvalidInput,
        "cannot import 'nomodule'",
        id="cli-recover-workflow-module-missing",
    ),
    pytest.param(["serve", "--max-body", "0"], EXIT_USAGE, None, "--max-body", id="cli-serve-max-body-zero"),
    pytest.param(
        ["serve", "--no-auth", "--notebooks", "{root}", "--allowed-host", "*"],
        EXIT_FAILED,
        dnb.ConfigurationError,
        "'*' alone",
        id="cli-serve-allowed-host-star",
    ),
    pytest.param(["approve", "{done}"], EXIT_STATE, dnb.AlreadyResumed, "no gate left", id="cli-approve-completed-run"),
    pytest.param(
        ["reject", "{failed}"], EXIT_STATE, dnb.AlreadyResumed, "not paused at a gate", id="cli-reject-failed-run"
    ),
    pytest.param(
        ["approve", "{paused}", "--node", "nowhere"],
        EXIT_NOT_FOUND,
        dnb.UnknownGate,
        "no gate waiting at node 'nowhere'",
        id="cli-approve-unknown-node",
    ),
    pytest.param(
        ["approve", "{paused}", "--value", "{{not json"],
        EXIT_FAILED,
        dnb.InvalidInput,
        "--value takes json",
        id="cli-approve-value-not-json",
    ),
    pytest.param(
        ["approve", "{paused}", "--value", '{{"__x": 1}}'],
        EXIT_FAILED,
        dnb.InvalidDecision,
        "reserved",
        id="cli-approve-value-reserved-name",
    ),
    pytest.param(
        ["approve", "no-such-run"], EXIT_NOT_FOUND, dnb.RunNotFound, "no run with id", id="cli-approve-unknown-run"
    ),
    pytest.param(
        ["cancel", "{done}"], EXIT_STATE, dnb.NotCancellable, "already completed", id="cli-cancel-completed-run"
    ),
    pytest.param(
        ["cancel", "no-such-run"], EXIT_NOT_FOUND, dnb.RunNotFound, "no run with id", id="cli-cancel-unknown-run"
    ),
    pytest.param(
        ["runs", "--store", "mysql://x"],
        EXIT_FAILED,
        dnb.StoreUnavailable,
        "unknown store url",
        id="cli-store-url-mysql",
    ),
    pytest.param(
        ["show", "{done}", "--store", "sqlite:///{root}"],
        EXIT_FAILED,
        dnb.StoreUnavailable,
        "cannot open the sqlite store",
        id="cli-store-url-directory",
    ),
    pytest.param(
        ["run-notebook", "{root}/none.ipynb", "-p", "class", "1"],
        EXIT_USAGE,
        dnb.InvalidNotebookRun,
        "not a keyword",
        id="cli-run-notebook-keyword-parameter",
    ),
    pytest.param(
        ["run-notebook", "{root}/none.ipynb", "-p", "a=b", "1"],
        EXIT_USAGE,
        dnb.InvalidNotebookRun,
        "'a=b'",
        id="cli-run-notebook-equals-in-parameter-name",
    ),
    pytest.param(
        ["run-notebook", "{root}/none.ipynb", "--run", "x\nprint(1)"],
        EXIT_USAGE,
        dnb.InvalidNotebookRun,
        "control characters",
        id="cli-run-notebook-run-name-newline",
    ),
    pytest.param(
        ["run-notebook", "{root}/none.ipynb", "-f", "{root}"],
        EXIT_USAGE,
        dnb.InvalidNotebookRun,
        "is a folder",
        id="cli-run-notebook-parameters-file-folder",
    ),
    pytest.param(
        ["run-notebook", "{root}/none.ipynb", "-f", "{root}/none.yaml"],
        EXIT_USAGE,
        dnb.InvalidNotebookRun,
        "no such file",
        id="cli-run-notebook-parameters-file-missing",
    ),
    pytest.param(
        ["run-notebook", "/dev/zero"],
        EXIT_USAGE,
        dnb.InvalidNotebookRun,
        "character device",
        id="cli-run-notebook-dev-zero",
    ),
    pytest.param(
        ["run-notebook", "{root}"], EXIT_USAGE, dnb.InvalidNotebookRun, "is a folder", id="cli-run-notebook-folder"
    ),
    pytest.param(
        ["runs", "--store", "sqlite:///{root}/nonexistent/dir/x.db"],
        EXIT_NOT_FOUND,
        dnb.StoreNotFound,
        "no durable_nb store at",
        id="cli-runs-store-missing",
    ),
    pytest.param(
        ["history", "{done}", "--store", "sqlite:///{root}/typo.db"],
        EXIT_NOT_FOUND,
        dnb.StoreNotFound,
        "typo.db",
        id="cli-history-store-missing",
    ),
    pytest.param(
        ["approve", "{paused}", "--store", "sqlite:///{root}/typo.db"],
        EXIT_NOT_FOUND,
        dnb.StoreNotFound,
        "start a run",
        id="cli-approve-store-missing",
    ),
    pytest.param(
        ["prune", "--older-than", "1d", "--store", "sqlite:///{root}/typo.db"],
        EXIT_NOT_FOUND,
        dnb.StoreNotFound,
        "no such file",
        id="cli-prune-store-missing",
    ),
    # A start of a run id that more than one run's id has (UUIDv7 ids made together share their start).
    pytest.param(
        ["show", "{done:.4}"], EXIT_USAGE, dnb.AmbiguousRunId, "give more of the id", id="cli-show-ambiguous-id-start"
    ),
    pytest.param(
        ["cancel", "{paused:.4}"],
        EXIT_USAGE,
        dnb.AmbiguousRunId,
        "(gated, paused)",
        id="cli-cancel-ambiguous-lists-runs",
    ),
]


def _cli(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as done:  # argparse refuses bad usage by exiting
        code = int(done.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(("argv", "exit_code", "error", "fragment"), CLI)
def test_cli_refuses(
    world: World,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    exit_code: int,
    error: type[dnb.DurableError] | None,
    fragment: str,
) -> None:
    """``durable-nb`` exits with the documented code and prints one line ``error: …`` on stderr (with
    --json, one JSON object naming the error's type); nothing is printed on stdout and nothing stored
    changes."""
    world.build()
    before = world.picture()
    names = {"done": world.done.id, "paused": world.paused.id, "failed": world.failed.id, "root": world.root}
    args = [part.format(**names) for part in argv]
    if "--store" not in args:
        args += ["--store", world.url]
    code, out, err = _cli(capsys, args)
    assert code == exit_code, err
    assert out == ""
    if error is None:  # argparse: usage, then one "error:" line naming the bad argument
        last = err.strip().splitlines()[-1]
        assert "error:" in last and fragment.lower() in last.lower(), err
    else:
        assert err.startswith("error: ") and err.count("\n") == 1, err
        assert fragment.lower() in err.lower(), err
        code, out, err = _cli(capsys, [*args, "--json"])
        assert code == exit_code and out == ""
        assert err.count("\n") == 1, err
        record = json.loads(err)["error"]
        assert record["exit_code"] == exit_code
        assert fragment.lower() in record["message"].lower()
        raised = getattr(dnb, record["type"], None)
        assert isinstance(raised, type) and issubclass(raised, error), record  # the type, or a subclass of it
    assert world.picture() == before


# -- 6. %%durable and %durable in a real IPython shell ----------------------------------------------------


class Kernel:
    """A fresh IPython shell with the extension loaded, attached to a run with one committed cell."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.shell = InteractiveShell()
        self.shell.run_line_magic("load_ext", "durable_nb")
        self.ok(f"%durable run analysis --store {url}")
        self.ok("%%durable load\nx = 1\nrows = [1, 2, 3]\n")

    def ok(self, source: str) -> None:
        result = self.shell.run_cell(source)
        assert result.success, result.error_in_exec or result.error_before_exec

    @property
    def run_id(self) -> str | None:
        from durable_nb.notebook.session import session_for

        return session_for(self.shell).attached_run_id

    def close(self) -> None:
        from durable_nb._loop import run_sync
        from durable_nb.notebook.session import session_for

        session = session_for(self.shell)
        if session.cell_run is not None:
            run_sync(session.cell_run.release())


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    url = f"sqlite:///{tmp_path}/runs.db"
    k = Kernel(url)
    yield k
    k.close()
    disconnect(url)


_BODY = "\nran = True\n"

MAGICS = [
    pytest.param("%%durable step --timeout nan" + _BODY, None, "--timeout", id="cell-timeout-nan"),
    pytest.param("%%durable step --timeout -1" + _BODY, None, "--timeout", id="cell-timeout-negative"),
    pytest.param("%%durable step --timeout 0" + _BODY, None, "--timeout", id="cell-timeout-zero"),
    pytest.param("%%durable step --timeout inf" + _BODY, None, "--timeout", id="cell-timeout-inf"),
    pytest.param("%%durable step --timeout soon" + _BODY, None, "--timeout", id="cell-timeout-text"),
    pytest.param("%%durable step --retries -1" + _BODY, None, "--retries", id="cell-retries-negative"),
    pytest.param("%%durable step --retries 1.5" + _BODY, None, "--retries", id="cell-retries-float"),
    pytest.param("%%durable step --bogus" + _BODY, None, "unrecognized arguments: --bogus", id="cell-unknown-option"),
    pytest.param("%%durable" + _BODY, None, "node", id="cell-without-node-name"),
    pytest.param("%%durable a!b" + _BODY, None, "short word", id="cell-node-name-not-a-word"),
    pytest.param("%durable fork --set __x=1", dnb.InvalidInput, "reserved", id="line-fork-set-dunder"),
    pytest.param("%durable fork --set __loop_x=1", dnb.InvalidInput, "reserved", id="line-fork-set-loop-counter"),
    pytest.param(
        "%durable fork --set x=__import__('os')", dnb.InvalidInput, "not a python literal", id="line-fork-set-code"
    ),
    pytest.param("%durable fork --set x", dnb.InvalidInput, "name = python literal", id="line-fork-set-no-value"),
    pytest.param("%durable fork --set x='text'", dnb.InvalidInput, "x is int", id="line-fork-set-changes-type"),
    pytest.param("%durable fork --at nowhere", dnb.DurableError, "nowhere", id="line-fork-at-unknown-cell"),
    pytest.param("%durable switch no-such-run", dnb.RunNotFound, "no run with id", id="line-switch-unknown-run"),
    pytest.param("%durable switch", None, "give the run id", id="line-switch-without-run"),
    pytest.param("%durable explode", None, "takes one of", id="line-unknown-subcommand"),
    pytest.param("%durable history no-such-run", dnb.RunNotFound, "no run with id", id="line-history-unknown-run"),
    pytest.param("%durable forks no-such-run", dnb.RunNotFound, "no run with id", id="line-forks-unknown-run"),
    pytest.param(
        "%durable run other --store mysql://x", dnb.StoreUnavailable, "unknown store url", id="line-run-store-mysql"
    ),
    pytest.param("%durable run other --id no-such-run", dnb.RunNotFound, "no run with id", id="line-run-unknown-id"),
    pytest.param("%durable approve --bogus", None, "unrecognized arguments", id="line-approve-unknown-option"),
    pytest.param(
        "%durable fork --set \"x='text'\"", dnb.InvalidInput, "x is int", id="line-fork-set-quoted-changes-type"
    ),
    pytest.param('%durable switch ""', None, "give the run id", id="line-switch-empty-quoted-run"),
    pytest.param("%durable inspect no-such-run", dnb.RunNotFound, "no run with id", id="line-inspect-unknown-run"),
    pytest.param("%durable notes maybe", None, "takes on or off", id="line-notes-neither-on-nor-off"),
    pytest.param("%durable run", None, "needs the run's name", id="line-run-without-name"),
    pytest.param(
        "%durable run --from-env", dnb.InvalidInput, "$DURABLE_NB_ATTACH", id="line-run-from-env-without-handover"
    ),
    pytest.param("%durable run other --from-env", None, "environment only", id="line-run-from-env-with-a-name"),
]


def _chain(error: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in found:
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


@pytest.mark.parametrize(("source", "cause", "fragment"), MAGICS)
def test_magic_refuses(
    kernel: Kernel,
    capsys: pytest.CaptureFixture[str],
    source: str,
    cause: type[dnb.DurableError] | None,
    fragment: str,
) -> None:
    """A bad magic line stops with one ``UsageError: …`` line (no traceback) saying what to do; when the
    engine refused it, the DurableError it raised is chained. The cell body does not run, and the kernel
    stays attached to its run, whose checkpoints are unchanged."""
    run_id = kernel.run_id
    steps = _steps(kernel.url, run_id or "")
    runs = _run_count(kernel.url)
    capsys.readouterr()
    result = kernel.shell.run_cell(source)
    err = capsys.readouterr().err
    error = result.error_in_exec or result.error_before_exec
    assert not result.success and error is not None, f"the magic was accepted: {source!r}"
    assert isinstance(error, UsageError), f"raised {type(error).__name__}: {error}"
    assert fragment.lower() in str(error).lower(), str(error)
    assert "UsageError" in err and "Traceback" not in err, err
    if cause is not None:
        chained = [e for e in _chain(error) if isinstance(e, cause)]
        assert chained, f"no {cause.__name__} behind {error!r}: {[type(e).__name__ for e in _chain(error)]}"
    assert "ran" not in kernel.shell.user_ns
    assert kernel.shell.user_ns["x"] == 1
    assert kernel.run_id == run_id
    assert _steps(kernel.url, run_id or "") == steps
    assert _run_count(kernel.url) == runs


# -- 7. the service over HTTP ---------------------------------------------------------------------------

SERVICE_TOKENS = f"ops:admin:{'a' * 24},ana:decide:{'d' * 24},viewer:read:{'r' * 24}"
ADMIN, DECIDER = {"Authorization": f"Bearer {'a' * 24}"}, {"Authorization": f"Bearer {'d' * 24}"}
JSON = {"Content-Type": "application/json"}
ORIGIN = "http://127.0.0.1"  # where the app is reached in these cases (a loopback name)


def _service_app(w: World) -> Any:
    from durable_nb.service.app import create_app
    from durable_nb.service.auth import Auth, load_tokens

    notebooks = w.root / "notebooks"
    notebooks.mkdir(exist_ok=True)
    if not (notebooks / "loop.ipynb").is_symlink():
        (notebooks / "loop.ipynb").symlink_to(notebooks / "loop.ipynb")
    auth = Auth(load_tokens(environ={"DURABLE_NB_TOKENS": SERVICE_TOKENS}))
    return create_app([w.plain, w.gated, w.broken], store=w.url, auth=auth, recover_every=3600, notebooks=notebooks)


def _page_form(client: Any, w: World, **fields: Any) -> dict[str, Any]:
    """The paused run's form as the signed-in decider's page renders it, with ``fields`` changed (None: left out)."""
    client.get(f"/?token={'d' * 24}")
    page = client.get("/").text.split(f"data-run='{w.paused.id}'", 1)[1].split("</section>", 1)[0]
    form = dict(re.findall(r"<input type='hidden' name='(\w+)' value='([^']*)'>", page), approved="true")
    return {k: v for k, v in {**form, **fields}.items() if v is not None}


def _post(path: str, headers: dict[str, str], body: Any = "") -> Callable[[Any, World], Any]:
    def send(client: Any, w: World) -> Any:
        content = body(w) if callable(body) else body
        return client.post(path.format(paused=w.paused.id), content=content, headers=headers)

    return send


def _form(headers: dict[str, str | None], **fields: Any) -> Callable[[Any, World], Any]:
    def send(client: Any, w: World) -> Any:
        sent = {k: v for k, v in {"Origin": ORIGIN, **headers}.items() if v is not None}
        return client.post(f"/runs/{w.paused.id}/decide", data=_page_form(client, w, **fields), headers=sent)

    return send


def _get(path: str, headers: dict[str, str] | None = None) -> Callable[[Any, World], Any]:
    return lambda client, w: client.get(path.format(paused=w.paused.id), headers={**ADMIN, **(headers or {})})


def _streamed(size: int) -> Iterator[bytes]:
    yield b'{"input": {"x": "'
    for _ in range(size // 65536):
        yield b"x" * 65536
    yield b'"}}'


def http(case_id: str, call: Callable[[Any, World], Any], status: int, error: type, fragment: str) -> Any:
    return pytest.param(call, status, error, fragment, id=case_id)


SERVICE = [
    # the Host allow-list (DNS rebinding)
    http(
        "http-host-not-allowed", _get("/api/runs", {"Host": "attacker.example"}), 400, HostNotAllowed, "--allowed-host"
    ),
    # a page of another origin: no text/plain or form posts to the API, no foreign Origin
    http(
        "http-cancel-text-plain",
        _post("/api/runs/{paused}/cancel", {**ADMIN, "Content-Type": "text/plain"}),
        415,
        UnsupportedMediaType,
        "application/json",
    ),
    http(
        "http-approve-form-encoded",
        _post(
            "/api/runs/{paused}/approve",
            {**ADMIN, "Content-Type": "application/x-www-form-urlencoded"},
            "approved=true",
        ),
        415,
        UnsupportedMediaType,
        "application/json",
    ),
    http(
        "http-cancel-foreign-origin",
        _post("/api/runs/{paused}/cancel", {**ADMIN, **JSON, "Origin": "http://127.0.0.1:9"}),
        403,
        CrossSiteRequest,
        "comes from",
    ),
    http(
        "http-approve-origin-null",
        _post("/api/runs/{paused}/approve", {**DECIDER, **JSON, "Origin": "null"}, "{}"),
        403,
        CrossSiteRequest,
        "comes from 'null'",
    ),
    # bodies: the token first, then the limit, then the depth
    http(
        "http-large-body-without-token",
        _post("/api/workflows/simple/runs", JSON, b"[" * (2 << 20)),
        401,
        Unauthorized,
        "bearer token",
    ),
    http(
        "http-body-over-the-limit",
        _post("/api/workflows/gated/runs", {**ADMIN, **JSON}, b" " * (1 << 20) + b"{}"),
        413,
        BodyTooLarge,
        "at most 1,048,576 bytes",
    ),
    http(
        "http-body-streamed-over-the-limit",
        _post("/api/workflows/gated/runs", {**ADMIN, **JSON}, lambda w: _streamed(2 << 20)),
        413,
        BodyTooLarge,
        "--max-body",
    ),
    http(
        "http-json-too-deep",
        _post("/api/workflows/gated/runs", {**ADMIN, **JSON}, '{"input": {"x": ' + "[" * 70 + "]" * 70 + "}}"),
        400,
        JsonTooDeep,
        "more than 64 deep",
    ),
    # the API's own checks
    http(
        "http-idempotency-key-other-body",
        _post("/api/workflows/gated/runs", {**ADMIN, **JSON, "Idempotency-Key": "paused-key"}, '{"input": {"x": 9}}'),
        422,
        dnb.IdempotencyKeyReused,
        "already started run",
    ),
    http(
        "http-approve-unknown-node",
        _post("/api/runs/{paused}/approve", {**DECIDER, **JSON}, '{"node": "prepare"}'),
        404,
        dnb.UnknownGate,
        "it waits at node 'review'",
    ),
    http(
        "http-events-after-past-64-bits",
        _get("/api/runs/{paused}/events?after=99999999999999999999999"),
        400,
        dnb.InvalidInput,
        "after=",
    ),
    http("http-events-after-negative", _get("/api/runs/{paused}/events?after=-1"), 400, dnb.InvalidInput, "after="),
    http(
        "http-notebook-link-loop",
        _post("/api/notebooks/loop.ipynb/runs", {**ADMIN, **JSON}, "{}"),
        400,
        NotebookPathRefused,
        "symbolic link loop",
    ),
    http(
        "http-notebook-path-5000",
        _post("/api/notebooks/" + "d/" * 2500 + "n.ipynb/runs", {**ADMIN, **JSON}, "{}"),
        400,
        NotebookPathRefused,
        "5,007 characters",
    ),
    http(
        "http-notebook-name-300",
        _post("/api/notebooks/" + "n" * 294 + ".ipynb/runs", {**ADMIN, **JSON}, "{}"),
        400,
        NotebookPathRefused,
        "file name too long",
    ),
    # the approvals page's form
    http("page-form-without-csrf-token", _form({}, csrf=None), 403, CrossSiteRequest, "token"),
    http("page-form-wrong-csrf-token", _form({}, csrf="0" * 64), 403, CrossSiteRequest, "token"),
    http("page-form-foreign-origin", _form({"Origin": "http://127.0.0.1:9"}), 403, CrossSiteRequest, "comes from"),
    http("page-form-no-origin", _form({"Origin": None}), 403, CrossSiteRequest, "names no origin"),
    http("page-form-without-approved", _form({}, approved=None), 400, dnb.InvalidDecision, "approved must be"),
    http("page-form-approved-yes", _form({}, approved="yes"), 400, dnb.InvalidDecision, "approved must be"),
    http("page-form-approved-twice", _form({}, approved=["true", "false"]), 400, dnb.InvalidDecision, "more than once"),
]


@pytest.mark.parametrize(("call", "status", "error", "fragment"), SERVICE)
def test_service_refuses(
    world: World, call: Callable[[Any, World], Any], status: int, error: type, fragment: str
) -> None:
    """A request the service refuses gets the status of its typed error and says what to do (the JSON error
    shape, or the page's HTML); every stored run, checkpoint, gate and row is as it was."""
    pytest.importorskip("fastapi", reason="the service needs the serve extra (fastapi, uvicorn)")
    from fastapi.testclient import TestClient

    from durable_nb.service.errors import status_of

    world.build()
    with TestClient(_service_app(world), base_url=ORIGIN) as client:
        before = world.picture()
        response = call(client, world)
        after = world.picture()
    assert response.status_code == status == status_of(error("")), response.text
    if response.headers["content-type"].startswith("application/json"):
        assert issubclass(error_from(response.json(), status).__class__, error), response.text
        text = response.json()["message"]
    else:
        text = html.unescape(response.text)
    assert fragment.lower() in text.lower(), text
    assert after == before


# -- the catalogue's size ----------------------------------------------------------------------------


def test_catalogue_size() -> None:
    """The module docstring states how many cases the catalogue holds; every expected type is a DurableError."""
    groups = [NOTHING_STORED, STORE_URLS, INTACT, FAILED_RUNS, CLI, MAGICS, SERVICE]
    ids = [p.id for group in groups for p in group]
    assert len(ids) == len(set(ids)), "case ids repeat"
    assert len(ids) == CASE_COUNT >= 110
    assert f"holds {CASE_COUNT} cases" in (__doc__ or "")
    for group in (NOTHING_STORED, STORE_URLS, INTACT, FAILED_RUNS, SERVICE):
        for p in group:
            expected = p.values[-2] if group is not FAILED_RUNS else p.values[2]
            for kind in expected if isinstance(expected, tuple) else (expected,):
                assert issubclass(kind, dnb.DurableError), p.id
