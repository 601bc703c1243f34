"""A headless notebook's run keeps its lease through a long cell: the process that started the kernel
renews it, so a server on another machine, which sees only the lease, never takes the run over while
the cell still runs; and it renews the lease of its own child kernel only."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import nbformat
import pytest
from notebookkit import child_env, run_notebook_command, write_notebook
from servicekit import until

import durable_nb as dnb
from durable_nb._loop import run_sync
from durable_nb.headless.lease_keeper import child_of_this_process
from durable_nb.store import connect

pytestmark = pytest.mark.backends("sqlite", "postgres")

LEASE = 3.0  # seconds: renewed every second while the cell waits


def test_a_long_cell_keeps_its_run_leased_without_a_commit(store_url: str, tmp_path: Path) -> None:
    """While one cell waits far longer than the lease, the run's lease moves on with no cell committed;
    the cell ran once and the run completes."""
    ran, release = tmp_path / "ran", tmp_path / "release"
    cells = [
        nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_code_cell(
            f"import os, time\nopen({str(ran)!r}, 'a').write('long\\n')\n"
            f"while not os.path.exists({str(release)!r}):\n    time.sleep(0.05)\ny = x + 1"
        ),
    ]
    notebook = write_notebook(tmp_path / "long.ipynb", cells)
    command = run_notebook_command(str(notebook), "-o", str(tmp_path / "out.ipynb"), "--store", store_url)
    env = child_env(TMPDIR=str(tmp_path), DURABLE_NB_LEASE_SECONDS=str(LEASE))
    with (tmp_path / "log").open("wb") as log:
        process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    store = connect(store_url)
    try:
        until(lambda: ran.exists(), "the long cell to start")
        [run] = run_sync(store.list_runs("long"))
        first = run_sync(store.get_run(run.run_id))
        assert first.status.value == "running" and first.lease_until is not None
        head = run_sync(store.head_checkpoint(run.run_id))
        # Renewed twice over, by the process that started the kernel: no cell committed meanwhile.
        until(
            lambda: (run_sync(store.get_run(run.run_id)).lease_until or 0) > first.lease_until + LEASE / 2,
            "the lease to be renewed",
        )
        now = run_sync(store.get_run(run.run_id))
        assert now.owner == first.owner and now.status.value == "running"
        assert run_sync(store.head_checkpoint(run.run_id)) == head
        release.touch()
        assert process.wait(timeout=240) == 0, (tmp_path / "log").read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert dnb.get_run(run.run_id, store=store_url).status == "completed"
    assert ran.read_text() == "long\n"


def test_only_a_live_child_counts_as_this_process_s_kernel() -> None:
    """The lease is kept for this process's own children only: not for itself, its parent, or a child that ended."""
    child = subprocess.Popen(["sleep", "120"])
    try:
        assert child_of_this_process(child.pid)
        assert not child_of_this_process(os.getpid())
        assert not child_of_this_process(os.getppid())
    finally:
        child.kill()
        child.wait()
    assert not child_of_this_process(child.pid)
