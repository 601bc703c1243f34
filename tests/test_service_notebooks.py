"""The service runs notebooks: ``POST /api/notebooks/{path}/runs`` (issue 18, the service part).

Real kernels: the server starts ``durable-nb run-notebook`` as a child process, on SQLite and
PostgreSQL. The same path and parameters find the same run (one child at a time), other
parameters start another; a gate pauses the run, it shows for approval, and a decision (over the
API or on the approvals page) starts the child again, which resumes and completes it. Paths
outside the notebooks folder are refused with typed errors. A real ``durable-nb serve`` killed
with SIGKILL (and its kernel with it) starts the run again on its own when it comes back.
Every wait polls the API or the store until a state is reached, with a generous deadline.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

import durable_nb as dnb
from durable_nb._ids import parse_owner
from durable_nb.service.auth import Auth, load_tokens

pytest.importorskip("fastapi", reason="the service needs the serve extra (fastapi, uvicorn)")

from fastapi.testclient import TestClient
from servicekit import ADMIN, BASE, DECIDER, READER, ROOT, TOKENS, Server, free_port, gate_form, until

from durable_nb.headless.notebook_run import run_key as command_key
from durable_nb.service.app import create_app
from durable_nb.service.mcp_tools import build_mcp
from durable_nb.service.notebook_folder import NotebookFolder
from durable_nb.service.notebook_runs import NotebookRuns
from durable_nb.service.operations import Service

# Notebooks the service runs, on SQLite but for one PostgreSQL case (the store is tested on both elsewhere).
pytestmark = [pytest.mark.slow, pytest.mark.backends("sqlite")]
DEADLINE = 240.0  # seconds: kernels start slowly on a busy machine


def _headers(token: str) -> dict[str, str]:
    # JSON on every request: the API refuses a state-changing one of any other type (415).
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def _side(folder: Path) -> list[str]:
    path = folder / "side.txt"
    return path.read_text().split() if path.exists() else []


def _report(notebooks: Path, folder: Path, name: str = "report.ipynb") -> Path:
    """A notebook with parameters; its last cell waits until the file 'release' exists."""
    side = str(folder / "side.txt")
    release = str(folder / "release")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell("# A report"),
        nbformat.v4.new_code_cell("region = 'US'\nlimit = 3", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(f"open({side!r}, 'a').write('load\\n')\nrows = list(range(limit))"),
        nbformat.v4.new_code_cell(
            f"import os, time\nopen({side!r}, 'a').write('wait\\n')\n"
            f"end = time.monotonic() + 300\nwhile not os.path.exists({release!r}) and time.monotonic() < end:\n"
            "    time.sleep(0.05)\ntotal = sum(rows)\nprint('total', total, region)"
        ),
    ]
    path = notebooks / name
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, str(path))
    return path


def _gated(notebooks: Path) -> Path:
    """A notebook with two gates, one after the other."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_code_cell(
            "import durable_nb as dnb\nfirst = dnb.gate('publish?', {'x': x})\napproved = first.approved"
        ),
        nbformat.v4.new_code_cell("second = dnb.gate('really publish?', {'x': x})\nby = second.by"),
    ]
    path = notebooks / "gated.ipynb"
    nbformat.write(notebook, str(path))
    return path


def _launches(output: str) -> int:
    """How many times the server started the notebook's process for this run (its log says)."""
    log = Path(output).with_suffix(".log")
    return sum(1 for line in log.read_text().splitlines() if line.startswith("-- ")) if log.exists() else 0


@pytest.fixture(autouse=True)
def _temporary_files_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The children's temporary files stay in the test's folder: a child killed with its server cannot
    remove its kernel's socket folder."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))


@pytest.fixture
def notebooks(tmp_path: Path) -> Path:
    folder = tmp_path / "notebooks"
    folder.mkdir()
    return folder


@pytest.fixture
def app_client(notebooks: Path, store_url: str) -> Iterator[TestClient]:
    auth = Auth(load_tokens(environ={"DURABLE_NB_TOKENS": TOKENS}))
    app = create_app([], store=store_url, auth=auth, recover_every=3600, notebooks=notebooks)
    with TestClient(app, base_url=BASE) as client:
        yield client


def _status(client: TestClient, run_id: str) -> str:
    return str(client.get(f"/api/runs/{run_id}", headers=_headers(READER)).json()["status"])


def _reaches(client: TestClient, run_id: str, status: str) -> None:
    until(lambda: _status(client, run_id) == status, f"run {run_id} to be {status} (it is {_status(client, run_id)})")


# -- running a notebook ------------------------------------------------------------------------------


@pytest.mark.backends("sqlite", "postgres")  # the one PostgreSQL case of notebooks run by the service
def test_a_notebook_runs_once_per_path_and_parameters(
    app_client: TestClient, notebooks: Path, tmp_path: Path, store_url: str
) -> None:
    path = _report(notebooks, tmp_path)
    before = path.read_text()
    body = {"parameters": {"region": "EU", "limit": 5}}
    started = app_client.post("/api/notebooks/report.ipynb/runs", json=body, headers=_headers(ADMIN))
    assert started.status_code == 202, started.text
    run_id, output = started.json()["id"], started.json()["output"]
    assert started.json()["status"] == "pending"
    # The kernel attached to the very run the service created: found by the command's own key.
    record = dnb.get_run(run_id, store=store_url).record
    assert record.idempotency_key == command_key(path.resolve(), body["parameters"])

    until(lambda: _status(app_client, run_id) == "running" and "wait" in _side(tmp_path), "the last cell to run")
    # The store's URL reaches the child in its environment; its command line, which any user can read, lacks it.
    child = app_client.app.state.service.notebooks.children[run_id].process  # type: ignore[attr-defined]
    assert store_url not in Path(f"/proc/{child.pid}/cmdline").read_bytes().decode()
    assert f"DURABLE_NB_STORE={store_url}" in Path(f"/proc/{child.pid}/environ").read_bytes().decode()
    for _ in range(2):  # asked again while its process works: the same run, no second process
        again = app_client.post("/api/notebooks/report.ipynb/runs", json=body, headers=_headers(ADMIN))
        assert again.status_code == 202 and again.json()["id"] == run_id
    (tmp_path / "release").touch()
    _reaches(app_client, run_id, "completed")
    assert _side(tmp_path) == ["load", "wait"] and _launches(output) == 1
    # The child's kernel listened on Unix sockets: ipykernel's TCP warning is not in the child's log.
    assert "without encryption" not in Path(output).with_suffix(".log").read_text()

    written = nbformat.read(output, as_version=4)
    injected = [c for c in written.cells if "injected-parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(injected) == 1 and 'region = "EU"' in injected[0].source and "limit = 5" in injected[0].source
    assert "total 10 EU" in "".join(o.get("text", "") for o in written.cells[-1].outputs)
    assert path.read_text() == before  # the notebook itself is never changed

    listed = app_client.get("/api/runs", params={"name": "report"}, headers=_headers(READER)).json()
    assert [(r["run_id"], r["kind"], r["status"]) for r in listed] == [(run_id, "notebook", "completed")]
    # Finished: the same request returns it as it is, and starts nothing.
    done = app_client.post("/api/notebooks/report.ipynb/runs", json=body, headers=_headers(ADMIN)).json()
    assert done == {"id": run_id, "status": "completed", "output": output}
    assert _launches(output) == 1 and len(dnb.runs("report", store=store_url)) == 1

    # Other parameters: another run.
    other = app_client.post(
        "/api/notebooks/report.ipynb/runs", json={"parameters": {"limit": 2}}, headers=_headers(ADMIN)
    ).json()
    assert other["id"] != run_id
    _reaches(app_client, other["id"], "completed")
    assert "total 1 US" in "".join(
        o.get("text", "") for o in nbformat.read(other["output"], as_version=4).cells[-1].outputs
    )
    assert len(dnb.runs("report", store=store_url)) == 2


def _queued(notebooks: Path, folder: Path) -> Path:
    """A notebook whose cell says how many of its kind are in flight as it starts, then waits for 'release'."""
    log, release = str(folder / "in-flight.txt"), str(folder / "release")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("n = 0", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(
            f"import glob, os, time\nmine = os.path.join({str(folder)!r}, f'in-flight-{{n}}')\n"
            f"open(mine, 'w').close()\nnow = len(glob.glob(os.path.join({str(folder)!r}, 'in-flight-*')))\n"
            f"open({log!r}, 'a').write(f'{{n}} {{now}}\\n')\n"
            f"while not os.path.exists({release!r}):\n    time.sleep(0.05)\nos.remove(mine)"
        ),
    ]
    path = notebooks / "queued.ipynb"
    nbformat.write(notebook, str(path))
    return path


def test_a_server_runs_at_most_max_notebooks_processes_and_the_rest_wait(
    notebooks: Path, tmp_path: Path, store_url: str
) -> None:
    """With --max-notebooks 1, three runs asked at once run one after the other: the others wait,
    pending and unclaimed (free for another server), and each starts once a place is free."""
    _queued(notebooks, tmp_path)
    auth = Auth(load_tokens(environ={"DURABLE_NB_TOKENS": TOKENS}))
    app = create_app([], store=store_url, auth=auth, recover_every=3600, notebooks=notebooks, max_notebooks=1)
    log = tmp_path / "in-flight.txt"
    with TestClient(app, base_url=BASE) as client:
        ids = [
            client.post(
                "/api/notebooks/queued.ipynb/runs", json={"parameters": {"n": n}}, headers=_headers(ADMIN)
            ).json()["id"]
            for n in (1, 2, 3)
        ]
        until(lambda: log.exists() and log.read_text().strip(), "the first run's cell to start")
        # The first holds the only place until released: the others cannot have started.
        waiting = [dnb.get_run(run_id, store=store_url).record for run_id in ids[1:]]
        assert [(run.status.value, run.owner) for run in waiting] == [("pending", None)] * 2
        assert len(client.app.state.service.notebooks.children) == 1  # type: ignore[attr-defined]
        (tmp_path / "release").touch()
        for run_id in ids:
            _reaches(client, run_id, "completed")
    lines = log.read_text().split("\n")[:-1]
    assert sorted(line.split()[0] for line in lines) == ["1", "2", "3"]  # each cell ran once
    assert {line.split()[1] for line in lines} == {"1"}  # never two at once


def test_max_notebooks_is_a_count_of_processes_with_a_notebooks_folder(notebooks: Path, store_url: str) -> None:
    from durable_nb.service.serve import serve

    auth = Auth({}, open_access=True)
    for wrong in (0, -2, True, 1.5):
        with pytest.raises(dnb.ConfigurationError, match="--max-notebooks takes a number"):
            create_app([], store=store_url, auth=auth, notebooks=notebooks, max_notebooks=wrong)  # type: ignore[arg-type]
    with pytest.raises(dnb.ConfigurationError, match="--max-notebooks goes with --notebooks DIR"):
        serve([dnb.Workflow("served", store=store_url)], no_auth=True, max_notebooks=2)


def test_a_gated_notebook_waits_for_approval_and_completes(
    app_client: TestClient, notebooks: Path, store_url: str
) -> None:
    _gated(notebooks)
    started = app_client.post("/api/notebooks/gated.ipynb/runs", json={}, headers=_headers(ADMIN)).json()
    run_id = started["id"]
    _reaches(app_client, run_id, "paused")
    paused = app_client.get("/api/runs", params={"status": "paused"}, headers=_headers(READER)).json()
    assert [(r["run_id"], r["kind"]) for r in paused] == [(run_id, "notebook")]
    page = app_client.get("/", headers=_headers(READER)).text
    assert f"data-run='{run_id}'" in page and "notebook <b>gated</b>" in page and "publish?" in page

    # Approved over the API: the server starts the notebook's process again; it resumes to the next gate.
    decided = app_client.post(f"/api/runs/{run_id}/approve", json={"comment": "ok"}, headers=_headers(DECIDER))
    assert decided.status_code == 202, decided.text
    until(
        lambda: "really publish?" in app_client.get("/", headers=_headers(READER)).text,
        "the second gate to show on the approvals page",
    )
    # Approved on the page: the same (its form carries the gate's node and the session's CSRF token).
    signed_in = {"Authorization": f"Bearer {DECIDER}"}
    form = {**gate_form(app_client.get("/", headers=signed_in).text, run_id), "approved": "true", "comment": "go"}
    assert form["node"] == dnb.get_run(run_id, store=store_url).pending_interrupt["node_id"]
    answer = app_client.post(f"/runs/{run_id}/decide", data=form, headers={**signed_in, "Origin": BASE})
    assert f"Approved run {run_id}" in answer.text
    _reaches(app_client, run_id, "completed")
    state = dnb.get_run(run_id, store=store_url).state
    assert state["approved"] is True and state["by"] == "ana"
    assert _launches(started["output"]) == 3  # the first run, and once after each decision


# -- refusals -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "body", "status", "error", "says"),
    [
        pytest.param(
            "/api/notebooks//etc/report.ipynb/runs", {}, 400, "NotebookPathRefused", "absolute", id="absolute"
        ),
        pytest.param("/api/notebooks/%2E%2E/report.ipynb/runs", {}, 400, "NotebookPathRefused", "'..'", id="dotdot"),
        pytest.param(
            "/api/notebooks/sub/%2E%2E/%2E%2E/x.ipynb/runs", {}, 400, "NotebookPathRefused", "'..'", id="dotdot-deep"
        ),
        pytest.param("/api/notebooks/escape.ipynb/runs", {}, 400, "NotebookPathRefused", "symbolic link", id="symlink"),
        pytest.param(
            "/api/notebooks/linked/report.ipynb/runs", {}, 400, "NotebookPathRefused", "symbolic link", id="symlink-dir"
        ),
        pytest.param("/api/notebooks/notes.txt/runs", {}, 400, "NotebookPathRefused", "only .ipynb", id="not-ipynb"),
        pytest.param("/api/notebooks/nope.ipynb/runs", {}, 404, "NotebookNotFound", "No notebook", id="missing"),
        pytest.param("/api/notebooks/folder.ipynb/runs", {}, 400, "NotebookPathRefused", "a folder", id="a-folder"),
        pytest.param("/api/notebooks/broken.ipynb/runs", {}, 400, "InvalidInput", "as a notebook", id="not-json"),
        pytest.param(
            "/api/notebooks/.durable-nb-outputs/old.ipynb/runs", {}, 400, "NotebookPathRefused", "output", id="output"
        ),
        pytest.param(
            "/api/notebooks/report.ipynb/runs",
            {"parameters": {"__class__": 1}},
            400,
            "InvalidNotebookRun",
            "cannot be assigned to",
            id="parameter-name",
        ),
        pytest.param(
            "/api/notebooks/report.ipynb/runs",
            {"parameters": {"class": 1}},
            400,
            "InvalidNotebookRun",
            "not a keyword",
            id="parameter-name-keyword",
        ),
        pytest.param(
            "/api/notebooks/report.ipynb/runs", {"run": "two words"}, 400, "InvalidInput", "letters", id="run-name"
        ),
        pytest.param(
            "/api/notebooks/report.ipynb/runs", {"parameters": [1]}, 422, "InvalidRequest", "parameters", id="body"
        ),
        pytest.param("/api/notebooks/loop.ipynb/runs", {}, 400, "NotebookPathRefused", "link loop", id="link-loop"),
        pytest.param(
            "/api/notebooks/looped/report.ipynb/runs", {}, 400, "NotebookPathRefused", "link loop", id="folder-loop"
        ),
        pytest.param(
            "/api/notebooks/" + "deep/" * 1000 + "report.ipynb/runs",
            {},
            400,
            "NotebookPathRefused",
            "5,012 characters",
            id="path-5000-characters",
        ),
        pytest.param(
            "/api/notebooks/" + "n" * 294 + ".ipynb/runs", {}, 400, "NotebookPathRefused", "too long", id="name-300"
        ),
    ],
)
def test_paths_outside_the_folder_are_refused(
    app_client: TestClient,
    notebooks: Path,
    tmp_path: Path,
    store_url: str,
    url: str,
    body: dict[str, Any],
    status: int,
    error: str,
    says: str,
) -> None:
    _report(notebooks, tmp_path)
    elsewhere = _report(tmp_path / "elsewhere", tmp_path)
    (notebooks / "escape.ipynb").symlink_to(elsewhere)
    (notebooks / "linked").symlink_to(elsewhere.parent, target_is_directory=True)
    (notebooks / "notes.txt").write_text("not a notebook")
    (notebooks / "folder.ipynb").mkdir()
    (notebooks / "broken.ipynb").write_text("{not json")
    (notebooks / "loop.ipynb").symlink_to(notebooks / "loop.ipynb")
    (notebooks / "looped").symlink_to(notebooks / "looped", target_is_directory=True)
    _report(notebooks / ".durable-nb-outputs", tmp_path, "old.ipynb")
    refused = app_client.post(url, json=body, headers=_headers(ADMIN))
    assert refused.status_code == status, refused.text
    assert refused.json()["error"] == error and says in refused.json()["message"]
    assert dnb.runs(store=store_url).empty  # a refused request starts nothing


def test_a_server_without_a_notebooks_folder_says_how_to_get_one(store_url: str) -> None:
    auth = Auth(load_tokens(environ={"DURABLE_NB_TOKENS": TOKENS}))
    with TestClient(create_app([], store=store_url, auth=auth, recover_every=3600), base_url=BASE) as client:
        refused = client.post("/api/notebooks/report.ipynb/runs", json={}, headers=_headers(ADMIN))
        assert refused.status_code == 404 and refused.json()["error"] == "NotebooksNotServed"
        assert "--notebooks DIR" in refused.json()["message"]
        decider = client.post("/api/notebooks/report.ipynb/runs", json={}, headers=_headers(DECIDER))
        assert decider.status_code == 403  # starting a notebook takes the admin scope, as starting a workflow


def test_serve_needs_workflows_or_notebooks() -> None:
    from durable_nb.service.serve import serve

    with pytest.raises(dnb.ConfigurationError, match="--notebooks DIR"):
        serve([], no_auth=True)
    with pytest.raises(dnb.ConfigurationError, match="no such folder"):
        create_app([], store="sqlite:///:memory:", auth=Auth({}, open_access=True), notebooks="/nonexistent-folder")


def test_the_mcp_tools_start_notebooks_only_where_the_server_runs_them(notebooks: Path, store_url: str) -> None:
    from durable_nb.service.auth import Token

    store = dnb.connect(store_url)
    admin = Token("ops", "admin")
    plain = asyncio.run(build_mcp(Service([], store), lambda: admin).list_tools())
    runner = NotebookRuns(NotebookFolder(notebooks), store)
    with_notebooks = asyncio.run(build_mcp(Service([], store, runner), lambda: admin).list_tools())
    assert "notebook_start" not in {t.name for t in plain}
    assert {t.name for t in with_notebooks} - {t.name for t in plain} == {"notebook_start"}


# -- a real server, killed and started again --------------------------------------------------------


class _NotebookServer(Server):
    """``durable-nb serve --notebooks DIR`` (no workflows) as a subprocess; killed or stopped as Server is."""

    def __init__(self, folder: Path, notebooks: Path, store: str) -> None:  # another command line than Server's
        port = free_port()
        env = dict(os.environ, DURABLE_NB_TOKENS=TOKENS, PYTHONPATH=str(ROOT))
        command = [sys.executable, "-m", "durable_nb.cli", "serve", "--notebooks", str(notebooks), "--store", store]
        self.process = subprocess.Popen(
            [*command, "--port", str(port), "--recover-every", "1"],
            env=env,
            cwd=folder,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.client = dnb.Client(f"http://127.0.0.1:{port}", token=ADMIN)

        def up() -> bool:
            try:
                self.client.runs()
                return True
            except dnb.DurableError:
                if self.process.poll() is not None:
                    raise AssertionError(self.process.stderr.read().decode()[-2000:]) from None  # type: ignore[union-attr]
                return False

        until(up, "the server to start")


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_notebook_run_killed_with_its_server_starts_again_when_the_server_does(
    tmp_path: Path, notebooks: Path, store_url: str
) -> None:
    _report(notebooks / "reports", tmp_path)
    servers: list[_NotebookServer] = []
    try:
        servers.append(_NotebookServer(tmp_path, notebooks, store_url))
        started = servers[0].client.start_notebook("reports/report.ipynb", {"region": "EU"})
        run_id = started["id"]
        until(lambda: "wait" in _side(tmp_path), "the last cell to run")
        # The machine goes down: the server, then the kernel working on the run (its child
        # process, left without a kernel, exits on its own).
        servers[0].kill()
        owner = dnb.get_run(run_id, store=store_url).record.owner
        assert owner is not None
        kernel = parse_owner(owner)[1]
        os.kill(kernel, signal.SIGKILL)
        until(lambda: _pid_gone(kernel), "the kernel to be gone")
        assert dnb.get_run(run_id, store=store_url).status == "running"
        (tmp_path / "release").touch()

        servers.append(_NotebookServer(tmp_path, notebooks, store_url))
        # Nobody asks: recovery on start starts the notebook's process again, which resumes the run.
        finished = servers[1].client.wait(run_id, until=("completed", "failed"), timeout=DEADLINE)["status"]
        log = Path(started["output"]).with_suffix(".log")
        assert finished == "completed", f"{dnb.get_run(run_id, store=store_url).error}\n{log.read_text()[-3000:]}"
        assert _side(tmp_path) == ["load", "wait", "wait"]  # the committed cell was restored, not run again
        assert _launches(started["output"]) == 2
        again = servers[1].client.start_notebook("reports/report.ipynb", {"region": "EU"})
        assert again == {**started, "status": "completed"}
    finally:
        for server in servers:
            server.stop()
