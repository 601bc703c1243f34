"""A notebook's run keeps its lease while its kernel lives: a headless notebook's through a long cell
(the process that started the kernel renews it, for its own child kernel only), and an interactive
kernel's between cells and during them (a thread of the kernel renews it). A server on another
machine, which sees only the lease, never takes such a run over."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import nbformat
import pytest
from kernelkit import Kernel
from notebookkit import child_env, run_notebook_command, write_notebook
from servicekit import until

import durable_nb as dnb
from durable_nb._loop import run_sync
from durable_nb.headless.lease_keeper import child_of_this_process
from durable_nb.store import connect

pytestmark = pytest.mark.backends("sqlite", "postgres")

LEASE = 3.0  # seconds: renewed every second while the cell waits


def lease_renewed_without_a_commit(store: Any, run_id: str) -> None:
    """Wait until the running run's lease has moved on by more than half a lease, with no checkpoint
    written meanwhile and in the same hands."""
    first = run_sync(store.get_run(run_id))
    assert first.status.value == "running" and first.lease_until is not None
    head = run_sync(store.head_checkpoint(run_id))
    until(
        lambda: (run_sync(store.get_run(run_id)).lease_until or 0) > first.lease_until + LEASE / 2,
        "the lease to be renewed",
    )
    now = run_sync(store.get_run(run_id))
    assert now.owner == first.owner and now.status.value == "running"
    assert run_sync(store.head_checkpoint(run_id)) == head


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
        lease_renewed_without_a_commit(store, run.run_id)
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


def test_an_idle_interactive_kernel_keeps_its_run_leased_and_commits_after(store_url: str, tmp_path: Path) -> None:
    """A kernel left idle after a cell keeps renewing its run's lease, with no commit; its next cell commits
    (a renewal in between does not make the kernel's own commit look like someone else's)."""
    kernel = Kernel(tmp_path, env={"DURABLE_NB_STORE": store_url, "DURABLE_NB_LEASE_SECONDS": str(LEASE)})
    try:
        assert kernel.run("%load_ext durable_nb\n%durable run idle").status == "ok"
        assert kernel.run("%%durable first\nx = 1").status == "ok"
        store = connect(store_url)
        [run] = run_sync(store.list_runs("idle"))
        lease_renewed_without_a_commit(store, run.run_id)
        second = kernel.run("%%durable second\ny = x + 1\ny")
        assert second.status == "ok", second.outputs
        assert run_sync(store.head_checkpoint(run.run_id)).node_id == "second"
    finally:
        kernel.close()
