"""Harness for tests that run whole notebooks headless: the CLI in a child process, the output read back."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}


def child_env(**extra: str) -> dict[str, str]:
    """The environment a child needs to import this checkout of durable_nb."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **extra)


def run_notebook_command(notebook: str, *args: str) -> list[str]:
    """``durable-nb run-notebook NOTEBOOK ARGS…`` as a command line for this interpreter."""
    return [sys.executable, "-m", "durable_nb.cli", "run-notebook", notebook, *args]


def write_notebook(path: Path, cells: list[Any]) -> Path:
    """Write a notebook of ``cells`` that names its kernel (papermill needs one)."""
    notebook = nbformat.v4.new_notebook(metadata={"kernelspec": KERNELSPEC})
    notebook.cells = cells
    nbformat.write(notebook, str(path))
    return path


def run(command: list[str], folder: Path, timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in ``folder`` to the end and return what it printed."""
    env = {"TMPDIR": str(folder), **env}  # the kernel's socket folder too stays in the test's folder
    return subprocess.run(command, cwd=folder, env=child_env(**env), capture_output=True, text=True, timeout=timeout)


def run_here(command: list[str], folder: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run a ``durable-nb`` command line (as ``run_notebook_command`` builds it) to the end by the command
    line's own ``main``, in this process and in ``folder``, with ``env`` set meanwhile; return what it printed.

    A child process would spend more than a second of CPU importing nbformat's schema checker before
    starting the same kernel; tests about processes (kills, temporary folders, shells) use ``run``.
    """
    from durable_nb.cli import main

    prefix = [sys.executable, "-m", "durable_nb.cli"]
    assert command[:3] == prefix, f"not a durable-nb command line: {command}"
    saved = {name: os.environ.get(name) for name in env}
    out, err = io.StringIO(), io.StringIO()
    try:
        os.environ.update(env)
        with contextlib.chdir(folder), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(command[3:])
            except SystemExit as exit:
                code = exit.code if isinstance(exit.code, int) else 1
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return subprocess.CompletedProcess(command, code, out.getvalue(), err.getvalue())


def start(command: list[str], folder: Path, log: Path) -> subprocess.Popen[bytes]:
    """Start ``command`` in a process group of its own, its output appended to ``log`` (no pipe to fill).

    Its temporary files go to ``folder``: a killed command cannot remove its kernel's socket folder.
    """
    with log.open("ab") as out:
        return subprocess.Popen(
            command,
            cwd=folder,
            env=child_env(TMPDIR=str(folder)),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by ``pid`` (gone already is fine)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def wait_gone(pid: int, timeout: float = 60) -> None:
    """Wait until ``pid`` (not our child, so not reapable here) has exited: absent or a zombie."""
    deadline = time.monotonic() + timeout
    stat = Path(f"/proc/{pid}/stat")
    while time.monotonic() < deadline:
        try:
            if stat.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                return
        except (FileNotFoundError, ProcessLookupError):
            return
        time.sleep(0.02)
    raise TimeoutError(f"process {pid} still runs {timeout} s after SIGKILL")


def kill_when_reached(command: list[str], folder: Path, reached: Path, where: str) -> None:
    """Run ``command`` in ``folder`` until the kernel writes its pid to ``reached``, then SIGKILL the command
    and the kernel (it leads a session of its own, so the command's group alone would leave it running)."""
    log = folder / "cli.log"
    child = start(command, folder, log)
    kernel = None
    try:
        deadline = time.monotonic() + 300
        while kernel is None:
            text = reached.read_text() if reached.exists() else ""
            if text:
                kernel = int(text)
            elif child.poll() is not None:
                pytest.fail(f"run-notebook ended ({child.returncode}) before {where}:\n{log.read_text()[-3000:]}")
            elif time.monotonic() > deadline:
                pytest.fail(f"the kernel did not reach {where} in 300 s:\n{log.read_text()[-3000:]}")
            else:
                time.sleep(0.02)
    finally:
        kill_group(child.pid)
        child.wait()
        if kernel is not None:
            kill_group(kernel)
            wait_gone(kernel)


def comparable(path: Path) -> dict[str, Any]:
    """The output notebook at ``path`` with only its truly volatile fields taken out."""
    notebook = nbformat.read(str(path), as_version=4)
    for cell in notebook.cells:
        # nbclient's wall-clock timestamps of each execution (iopub.status.busy, shell.execute_reply, …).
        cell.metadata.pop("execution", None)
        if "injected-parameters" in cell.metadata.get("tags", []):
            cell.pop("id", None)  # nbformat gives the injected cell a new random id every time it is made
    return dict(notebook)
