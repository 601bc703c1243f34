"""Many servers, one store: three ``durable-nb serve`` processes, killed at random with SIGKILL.

Workflow runs and notebook runs go through servers that share one store (a SQLite file, and
PostgreSQL when there is one) and one notebooks folder, while servers picked by a seeded random
choice are killed and started again. Every run completes; each node and cell body runs once,
but for those in flight in a server when it was killed; the processes running one notebook's
cells never do so at once, and each notebook's output is whole. Counted, never timed
(``benchmarks/fleet.py`` holds the harness; ``python -m benchmarks.fleet --runs 200`` is the soak).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from durable_nb._ids import parse_owner
from durable_nb._loop import run_sync
from durable_nb.engine.runs.ownership import pid_alive
from durable_nb.model import RunStatus
from durable_nb.store import resolve_store

pytest.importorskip("fastapi", reason="the service needs the serve extra (fastapi, uvicorn)")
pytest.importorskip("papermill", reason="notebook parameters are injected by papermill (the headless extra)")

from benchmarks.fleet import Fleet, soak, until

pytestmark = [pytest.mark.slow, pytest.mark.backends("sqlite", "postgres")]


@pytest.fixture(autouse=True)
def _temporary_files_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))


def test_three_servers_killed_at_random_finish_every_run_once(tmp_path: Path, store_url: str) -> None:
    report = soak(tmp_path, store_url, workflows=24, notebooks=8, kills=4, seed=7, window=10, deadline=220.0)
    assert report.kills >= 1, report.as_json()
    assert report.statuses == {"completed": 32}, report.as_json()
    assert report.problems == [], report.as_json()
    # Every node and cell ran, and only those in flight in a killed server ran again.
    assert report.executions == 24 * 3 + 8 * 3 + report.reruns, report.as_json()


def _waiting_notebook(path: Path, side: Path) -> None:
    """A notebook whose second cell waits for the file 'release' beside ``side``."""
    import nbformat

    release = side.with_name("release")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("tag = 'none'", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(f"open({str(side)!r}, 'a').write('one\\n')"),
        nbformat.v4.new_code_cell(
            f"import os, time\nopen({str(side)!r}, 'a').write('two\\n')\nend = time.monotonic() + 300\n"
            f"while not os.path.exists({str(release)!r}) and time.monotonic() < end:\n    time.sleep(0.05)"
        ),
    ]
    nbformat.write(notebook, str(path))


@pytest.mark.backends("sqlite")
def test_a_run_the_command_started_is_finished_by_a_server_after_the_command_dies(
    tmp_path: Path, store_url: str
) -> None:
    fleet = Fleet(tmp_path, store_url, servers=1)
    side = tmp_path / "side.txt"
    notebook = fleet.notebooks / "wait.ipynb"
    _waiting_notebook(notebook, side)
    command = [sys.executable, "-m", "durable_nb.cli", "run-notebook", str(notebook), "-p", "tag", "x"]
    process = subprocess.Popen([*command, "--store", store_url], env=fleet.env, cwd=tmp_path)
    try:
        until(lambda: side.exists() and "two" in side.read_text(), "the second cell to start", 240)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    store = resolve_store(store_url)
    (run,) = run_sync(store.list_runs("wait"))
    # Where a server finds the notebook again: its absolute path, its parameters, the run's name.
    assert run.meta == {"notebook": {"path": str(notebook.resolve()), "parameters": {"tag": "x"}, "run": None}}
    assert run.owner is not None
    kernel = parse_owner(run.owner)[1]
    if pid_alive(kernel):
        os.kill(kernel, signal.SIGKILL)
    until(lambda: not pid_alive(kernel), "the kernel to be gone", 60)
    side.with_name("release").touch()
    fleet.start()
    try:
        until(lambda: run_sync(store.get_run(run.run_id)).status is RunStatus.COMPLETED, "the run to complete", 240)
    finally:
        fleet.stop()
    assert side.read_text().split() == ["one", "two", "two"]  # the committed cell was restored, not run again
