"""Headless runs: nbclient and papermill behave the same; a crashed scheduled notebook resumes."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, DeadKernelError

import durable_nb as dnb

# Scheduled notebooks on SQLite, but for one PostgreSQL case (the store is tested on both elsewhere).
pytestmark = [pytest.mark.slow, pytest.mark.backends("sqlite")]


def scheduled_notebook(path: Path, counter: Path, flag: Path, store_url: str) -> Path:
    bump = "open(COUNTER, 'a').write('{}\\n')"
    cells = [
        nbformat.v4.new_code_cell(
            "COUNTER = 'unset'\nFLAG = 'unset'\nSTORE = 'unset'", metadata={"tags": ["parameters"]}
        ),
        nbformat.v4.new_code_cell(
            "%load_ext durable_nb\n%durable run nightly --store {STORE}".replace("{STORE}", store_url)
        ),
        nbformat.v4.new_code_cell(f"%%durable extract\n{bump.format('extract')}\nrows = list(range(100))"),
        nbformat.v4.new_code_cell(
            f"%%durable transform\n{bump.format('transform')}\nimport os, pathlib\n"
            "if not pathlib.Path(FLAG).exists():\n    pathlib.Path(FLAG).touch()\n    os.kill(os.getpid(), 9)\n"
            "doubled = [r * 2 for r in rows]"
        ),
        nbformat.v4.new_code_cell(f"%%durable load\n{bump.format('load')}\nloaded = sum(doubled)\nprint(loaded)"),
        nbformat.v4.new_code_cell("%durable end"),
    ]
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.cells[0].source = f"COUNTER = {str(counter)!r}\nFLAG = {str(flag)!r}\nSTORE = {store_url!r}"
    nbformat.write(notebook, path)
    return path


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


@pytest.mark.backends("sqlite", "postgres")  # the one PostgreSQL case of nbclient
def test_nbclient_rerun_after_crash_resumes(tmp_path: Path, store_url: str) -> None:
    """A notebook whose kernel dies under nbclient, run again on the same store, resumes at the cell in flight."""
    counter, flag = tmp_path / "counter.txt", tmp_path / "flag"
    path = scheduled_notebook(tmp_path / "nightly.ipynb", counter, flag, store_url)
    with pytest.raises((DeadKernelError, CellExecutionError, RuntimeError)):
        NotebookClient(nbformat.read(path, 4), timeout=120, resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert lines(counter) == ["extract", "transform"]
    executed = NotebookClient(
        nbformat.read(path, 4), timeout=120, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    assert lines(counter) == ["extract", "transform", "transform", "load"]
    outputs = "".join(o.get("text", "") for o in executed.cells[4].outputs)
    assert "9900" in outputs
    assert dnb.runs(store=store_url)["status"].tolist() == ["completed"]


def test_papermill_rerun_after_crash_resumes(tmp_path: Path, store_url: str) -> None:
    """The same with papermill and injected parameters."""
    import papermill

    counter, flag = tmp_path / "counter.txt", tmp_path / "flag"
    path = scheduled_notebook(tmp_path / "nightly.ipynb", counter, flag, store_url)
    parameters = {"COUNTER": str(counter), "FLAG": str(flag), "STORE": store_url}
    with pytest.raises(Exception):  # noqa: B017 - papermill wraps the dead kernel in its own error types
        papermill.execute_notebook(str(path), str(tmp_path / "out1.ipynb"), parameters=parameters, cwd=str(tmp_path))
    assert lines(counter) == ["extract", "transform"]
    papermill.execute_notebook(str(path), str(tmp_path / "out2.ipynb"), parameters=parameters, cwd=str(tmp_path))
    assert lines(counter) == ["extract", "transform", "transform", "load"]
    assert dnb.runs(store=store_url)["status"].tolist() == ["completed"]
