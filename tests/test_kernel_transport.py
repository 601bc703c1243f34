"""The kernels durable_nb starts listen on Unix sockets, not TCP (issue 27 item 8).

run-notebook, the papermill engine, the demo and the tests' own kernels: each kernel reports its
connection info from inside (ipykernel's ``get_connection_info``), which must name the IPC
transport and sockets in a folder only this user can enter, removed afterwards; ipykernel's
"Kernel is running over TCP without encryption" warning never appears. A temporary folder too
long for a socket path (the limit is 104 to 108 bytes) falls back to /tmp.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from kernelkit import Kernel
from notebookkit import run, run_notebook_command, write_notebook

pytestmark = pytest.mark.slow

WARNING = "without encryption"
# Run in the kernel: where it listens, and who may enter the folder of its sockets.
REPORT = """
import json, os
from ipykernel.connect import get_connection_info
info = json.loads(get_connection_info())
ipc = info['transport'] == 'ipc'
mode = oct(os.stat(os.path.dirname(info['ip'])).st_mode & 0o777) if ipc else None
json.dump({'transport': info['transport'], 'ip': info['ip'], 'mode': mode}, open('transport.json', 'w'))
"""


def _reported(folder: Path) -> dict[str, Any]:
    return dict(json.loads((folder / "transport.json").read_text()))


def _check_ipc(reported: dict[str, Any], under: Path) -> None:
    assert reported["transport"] == "ipc", reported
    assert reported["ip"].startswith(f"{under}/dnb-") and reported["mode"] == "0o700", reported
    assert len(f"{reported['ip']}-99") < 104  # the shortest limit of a socket path (macOS)
    assert not Path(reported["ip"]).parent.exists()  # removed with the kernel


@pytest.fixture
def sockets() -> Iterator[Path]:
    """A folder of this test's own, short enough for sockets wherever pytest keeps its temporary
    folders (a worker's are deeper): a longer one would fall back to /tmp, shared with other tests."""
    folder = Path(tempfile.mkdtemp(prefix="dnbt-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_run_notebook_kernels_listen_on_unix_sockets(tmp_path: Path, sockets: Path) -> None:
    write_notebook(tmp_path / "where.ipynb", [nbformat.v4.new_code_cell(REPORT)])
    command = run_notebook_command("where.ipynb", "--store", f"sqlite:///{tmp_path}/runs.db")
    done = run(command, tmp_path, TMPDIR=str(sockets))
    assert done.returncode == 0, done.stdout + done.stderr
    assert WARNING not in done.stderr and WARNING not in done.stdout, done.stderr
    _check_ipc(_reported(tmp_path), sockets)
    assert list(sockets.iterdir()) == []


def test_a_temporary_folder_too_long_for_sockets_falls_back_to_tmp(tmp_path: Path) -> None:
    write_notebook(tmp_path / "where.ipynb", [nbformat.v4.new_code_cell(REPORT)])
    deep = tmp_path / ("d" * 90)
    deep.mkdir()
    command = run_notebook_command("where.ipynb", "--store", f"sqlite:///{tmp_path}/runs.db")
    done = run(command, tmp_path, TMPDIR=str(deep))
    assert done.returncode == 0, done.stdout + done.stderr
    _check_ipc(_reported(tmp_path), Path("/tmp"))


def test_the_papermill_engines_kernels_listen_on_unix_sockets(tmp_path: Path, sockets: Path) -> None:
    pytest.importorskip("papermill", reason="the engine needs papermill")
    write_notebook(tmp_path / "where.ipynb", [nbformat.v4.new_code_cell(REPORT)])
    command = [
        sys.executable,
        "-m",
        "papermill",
        "where.ipynb",
        "out.ipynb",
        "--engine",
        "durable",
        "--no-progress-bar",
    ]
    done = run(command, tmp_path, TMPDIR=str(sockets), DURABLE_NB_STORE=f"sqlite:///{tmp_path}/runs.db")
    assert done.returncode == 0, done.stdout + done.stderr
    assert WARNING not in done.stderr, done.stderr
    _check_ipc(_reported(tmp_path), sockets)


def test_the_demos_and_the_tests_kernels_listen_on_unix_sockets(
    tmp_path: Path, sockets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from durable_nb.demo.run import _Kernel

    monkeypatch.setenv("TMPDIR", str(sockets))
    monkeypatch.setattr("tempfile.tempdir", None)  # read $TMPDIR again
    for start in (lambda: Kernel(tmp_path), lambda: _Kernel(tmp_path, dict(os.environ))):
        kernel = start()
        try:
            kernel.run(REPORT)
        finally:
            kernel.close()
        _check_ipc(_reported(tmp_path), sockets)


def test_socket_folders_of_killed_processes_are_removed_by_the_next_run(tmp_path: Path, sockets: Path) -> None:
    """A process killed before it removed its sockets' folder leaves it; the next kernel started there
    removes it, and leaves alone the folders of processes still alive."""
    write_notebook(tmp_path / "where.ipynb", [nbformat.v4.new_code_cell(REPORT)])
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()  # reaped: its pid is gone
    abandoned = sockets / f"dnb-{ended.pid}-abandoned"
    alive = sockets / f"dnb-{os.getpid()}-alive"
    for folder in (abandoned, alive):
        folder.mkdir(mode=0o700)
        (folder / "kernel-1").touch()
    command = run_notebook_command("where.ipynb", "--store", f"sqlite:///{tmp_path}/runs.db")
    done = run(command, tmp_path, TMPDIR=str(sockets))
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in sockets.iterdir()) == [alive.name]
