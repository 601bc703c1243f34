"""``durable-nb run-notebook`` writes the outputs a plain run shows, executed, restored or resumed.

Real kernels through nbclient, on SQLite and PostgreSQL. A cell ending in ``;`` shows no value,
as in a plain run; printed text, warnings, displays and progress lines of a run killed after them
and resumed read as in an uninterrupted run's output notebook.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import nbformat
import pytest
from notebookkit import comparable, kill_when_reached, run_here, run_notebook_command, write_notebook

# run-notebook on SQLite: its PostgreSQL case is in test_run_notebook.py, the store's in the conformance tests.
pytestmark = [pytest.mark.slow, pytest.mark.backends("sqlite")]

QUIET = [
    "import matplotlib.pyplot as plt\n\nfig, ax = plt.subplots()\nax.plot([1, 2, 3]);",
    "ax.set_xlabel('x');",
    "fig2 = plt.figure()\nplt.plot([2, 1])\nfig2;  # a call that returns its figure",
    "total = 40 + 2\ntotal",
]


def _outputs(path: Path) -> list[list[dict[str, Any]]]:
    """Each code cell's outputs, without execution counts (the durable copy runs one cell more)."""
    notebook = nbformat.read(str(path), as_version=4)
    found = []
    for cell in notebook.cells:
        if cell.cell_type == "code":
            found.append([{k: v for k, v in output.items() if k != "execution_count"} for output in cell.outputs])
    return found


def test_a_trailing_semicolon_hides_the_value_as_in_a_plain_run(tmp_path: Path, store_url: str) -> None:
    """A figure cell ending in ';' has one image, ``ax.set_xlabel('x');`` no Text(...), a cell that is
    not quiet its Out[n]: the same outputs as nbclient gives running the notebook plainly, when
    the cells execute and when a second run restores them all."""
    from nbclient import NotebookClient

    path = write_notebook(tmp_path / "quiet.ipynb", [nbformat.v4.new_code_cell(c) for c in QUIET])
    plain = nbformat.read(str(path), as_version=4)
    NotebookClient(plain, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    nbformat.write(plain, str(tmp_path / "plain.ipynb"))
    expected = _outputs(tmp_path / "plain.ipynb")
    assert [[o["output_type"] for o in cell] for cell in expected] == [
        ["display_data"],
        [],
        ["display_data"],
        ["execute_result"],
    ]
    command = run_notebook_command("quiet.ipynb", "-o", "out.ipynb", "--store", store_url)
    for attempt in ("executed", "restored"):
        done = run_here(command, tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr[-3000:]
        assert _outputs(tmp_path / "out.ipynb") == expected, attempt
    assert done.stdout.count("restored from checkpoint") == len(QUIET), done.stdout


HOLD = """
import os, time


def here():
    # Tell the test the kernel got here, then wait for its SIGKILL (when the hold file exists).
    if os.path.exists("hold"):
        with open("hold.reached", "w") as reached:
            reached.write(str(os.getpid()))
        while True:
            time.sleep(0.05)
"""

PIN_FLUSHES = "import sys\n\nsys.stdout.flush_interval = sys.stderr.flush_interval = 3600"

STREAMS = [
    "import sys, warnings\n\nprint('first')\nwarnings.warn_explicit('careful', UserWarning, 'check.py', 7)\n"
    "print('second')",
    "sys.stdout.write('one\\n')\nsys.stdout.flush()\nwritten = sys.stdout.write('two\\n')",
    "from IPython.display import HTML, display\n\nprint('before')\ndisplay(HTML('<b>shown</b>'))\n"
    "print('to stderr', file=sys.stderr)\ndisplay(42)\nprint('after')",
    "for i in range(20_000):\n    print('line', i)",
    "for i in range(0, 101, 5):\n    sys.stderr.write(f'\\r{i:3d}%|' + '#' * (i // 5))\n    sys.stderr.flush()\n"
    "sys.stderr.write('\\n')\nsys.stderr.flush()\nprint('done')",
    "__import__('holder').here()\nprint('after the kill point')",
]


def _streams_notebook(folder: Path, like: Path | None = None) -> None:
    """The notebook and its module in ``folder``: new, or a copy of the one in ``like`` (cell ids too)."""
    folder.mkdir()
    (folder / "holder.py").write_text(HOLD)
    if like is None:
        # ipykernel also sends what a stream holds every 0.2 s: a busy machine could cut a cell's printing
        # anywhere in one of the two runs compared. Only the flushes the cells ask for (and the end of the
        # cell) cut it here, so both runs send the same messages however slow the machine is.
        pin = nbformat.v4.new_code_cell(PIN_FLUSHES, metadata={"tags": ["not-durable"]})
        write_notebook(folder / "streams.ipynb", [pin, *(nbformat.v4.new_code_cell(c) for c in STREAMS)])
    else:
        shutil.copy(like / "streams.ipynb", folder / "streams.ipynb")


def test_a_resumed_run_writes_the_streams_of_an_uninterrupted_one(tmp_path: Path, store_url: str) -> None:
    """print/warn/print, flushed prints, prints between displays, 20,000 lines and '\\r' progress
    lines, restored after a kill: the output notebook equals an uninterrupted run's (print, warn,
    print is all stdout, then stderr, in both), and consecutive pieces of a stream are one output,
    as in JupyterLab."""
    command = run_notebook_command("streams.ipynb", "-o", "out.ipynb", "--store", store_url)
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    _streams_notebook(whole)
    done = run_here(command, whole)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    _streams_notebook(resumed, like=whole)
    (resumed / "hold").touch()
    kill_when_reached(command, resumed, resumed / "hold.reached", "the hold cell")
    (resumed / "hold").unlink()
    again = run_here(command, resumed)
    assert again.returncode == 0, again.stdout + again.stderr[-3000:]
    assert again.stdout.count("restored from checkpoint") == len(STREAMS) - 1, again.stdout
    expected = comparable(whole / "out.ipynb")
    assert comparable(resumed / "out.ipynb") == expected
    outputs = [cell["outputs"] for cell in expected["cells"][1:]]
    assert [(o["name"], o["text"]) for o in outputs[0]] == [
        ("stdout", "first\nsecond\n"),
        ("stderr", "check.py:7: UserWarning: careful\n"),
    ]
    assert [(o["name"], o["text"]) for o in outputs[1]] == [("stdout", "one\ntwo\n")]  # two messages, one output
    assert [o["output_type"] for o in outputs[2]] == ["stream", "display_data", "stream", "display_data", "stream"]
    assert [o["text"].count("\n") for o in outputs[3]] == [20_000]
    assert [(o["name"], o["text"].count("\r")) for o in outputs[4]] == [("stderr", 21), ("stdout", 0)]
