"""``durable-nb run-notebook`` (issue 18, first part): any notebook, durable without editing it.

Real kernels through nbclient, on SQLite and PostgreSQL. A failing cell ends with exit 1; the
same command again resumes: committed cells are restored, not run again (side effects are
counted in a file). Parameters are injected after the cell tagged ``parameters``; changed
parameters are a new run. A gate ends with exit 3 and says how to approve; ``--wait`` goes on
once another process approves. The notebook on disk is never changed; the output notebook
keeps the original sources.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from notebookkit import run_here, run_notebook_command
from terminalkit import Terminal

import durable_nb as dnb

# run-notebook on SQLite, but for one PostgreSQL case (the store is tested on both elsewhere).
pytestmark = [pytest.mark.slow, pytest.mark.backends("sqlite")]
ROOT = Path(__file__).resolve().parent.parent


def _notebook(folder: Path) -> Path:
    side = folder / "side.txt"
    note = f"open({str(side)!r}, 'a').write('{{}}\\n')"
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell("# A report"),
        nbformat.v4.new_code_cell("region = 'US'\nlimit = 3", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(
            f"{note.format('load')}\nrows = list(range(limit))\nprint('loaded', len(rows), region)"
        ),
        nbformat.v4.new_code_cell(
            f"import pathlib\n{note.format('check')}\n"
            f"if not pathlib.Path({str(folder / 'fixed')!r}).exists():\n    raise RuntimeError('not yet')\n"
            "total = sum(rows)"
        ),
        nbformat.v4.new_code_cell(f"{note.format('plain')}", metadata={"tags": ["not-durable"]}),
        nbformat.v4.new_code_cell(f"{note.format('end')}\nprint('total', total)"),
    ]
    path = folder / "report.ipynb"
    nbformat.write(notebook, str(path))
    return path


def _run(folder: Path, store_url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """``durable-nb run-notebook report.ipynb -o out.ipynb --store STORE …`` in ``folder``, to the end."""
    return run_here(run_notebook_command("report.ipynb", "-o", "out.ipynb", "--store", store_url, *extra), folder)


def _side(folder: Path) -> list[str]:
    path = folder / "side.txt"
    return path.read_text().split() if path.exists() else []


@pytest.mark.backends("sqlite", "postgres")  # the one PostgreSQL case of run-notebook
def test_a_failed_run_resumes_when_run_again(tmp_path: Path, store_url: str) -> None:
    path = _notebook(tmp_path)
    before = path.read_text()
    failed = _run(tmp_path, store_url, "-p", "region", "EU", "-p", "limit", "5")
    assert failed.returncode == 1, failed.stderr[-2000:]
    assert "a cell failed (RuntimeError: not yet)" in failed.stdout
    assert _side(tmp_path) == ["load", "check"]
    (tmp_path / "fixed").touch()
    done = _run(tmp_path, store_url, "-p", "region", "EU", "-p", "limit", "5")
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert "completed run report" in done.stdout
    # Not a terminal: one line per cell, saying how it got its outputs (issue 18 item 4).
    load = f"cell-{nbformat.read(str(path), as_version=4).cells[2].id}"  # named by its cell id
    assert re.search(rf"^\[\d+/\d+\] {load} restored from checkpoint$", done.stdout, re.M), done.stdout
    assert re.search(r"^\[\d+/\d+\] \S+ executed in \d.*s$", done.stdout, re.M), done.stdout
    assert dnb.runs("report", store=store_url)["status"].tolist() == ["completed"]  # ended, not left running
    # 'load' committed before the failure: restored, not run again; the failed cell ran again.
    assert _side(tmp_path) == ["load", "check", "check", "plain", "end"]
    assert path.read_text() == before  # the notebook itself is never changed
    out = nbformat.read(str(tmp_path / "out.ipynb"), as_version=4)
    tags = [c.get("metadata", {}).get("tags", []) for c in out.cells]
    assert tags[1] == ["parameters"] and tags[2] == ["injected-parameters"]
    assert out.cells[2].source == '# Parameters\nregion = "EU"\nlimit = 5\n'  # papermill's spelling
    assert not any("%%durable" in c.source for c in out.cells)  # the original sources
    printed = "".join(o.get("text", "") for o in out.cells[-1].outputs)
    assert "total 10" in printed
    # The same parameters again: one run, finished; everything restored, nothing runs.
    again = _run(tmp_path, store_url, "-p", "region", "EU", "-p", "limit", "5")
    assert again.returncode == 0 and _side(tmp_path) == ["load", "check", "check", "plain", "end", "plain"]
    assert len(dnb.runs("report", store=store_url)) == 1
    # Other parameters: another run.
    other = _run(tmp_path, store_url, "-p", "region", "US")
    assert other.returncode == 0 and len(dnb.runs("report", store=store_url)) == 2


GATED = """
import durable_nb as dnb
decision = dnb.gate("publish?", {"total": 3})
approved = decision.approved
"""


def test_a_gate_exits_3_and_wait_goes_on_once_approved(tmp_path: Path, store_url: str) -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell(GATED)]
    nbformat.write(notebook, str(tmp_path / "report.ipynb"))
    paused = _run(tmp_path, store_url)
    assert paused.returncode == 3, paused.stdout + paused.stderr[-2000:]
    run_id = str(dnb.runs("report", store=store_url).run_id.iloc[0])
    assert f"durable-nb approve {run_id}" in paused.stdout
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "durable_nb.cli", "run-notebook", "report.ipynb", "--store", store_url, "--wait"]
    waiting = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        for _ in range(600):
            if dnb.get_run(run_id, store=store_url).status == "paused":
                break
            time.sleep(0.05)
        dnb.approve(run_id, comment="from another process", store=store_url)
        out, err = waiting.communicate(timeout=300)
    finally:
        if waiting.poll() is None:
            waiting.kill()
    assert waiting.returncode == 0, out + err[-2000:]
    assert dnb.get_run(run_id, store=store_url).state["approved"] is True


def test_the_papermill_engine_resumes_a_failed_run(tmp_path: Path, store_url: str) -> None:
    """`papermill --engine durable`: papermill's parameters and output, every cell durable, resumed on a rerun."""
    pytest.importorskip("papermill", reason="the engine needs papermill")
    _notebook(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(ROOT), DURABLE_NB_STORE=store_url)
    command = [
        sys.executable, "-m", "papermill", "report.ipynb", "out.ipynb", "--engine", "durable", "-k", "python3",
        "--language", "python", "-p", "region", "EU", "-p", "limit", "5", "--no-progress-bar",
    ]  # fmt: skip
    failed = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert failed.returncode != 0 and _side(tmp_path) == ["load", "check"], failed.stderr[-2000:]
    (tmp_path / "fixed").touch()
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _side(tmp_path) == ["load", "check", "check", "plain", "end"]
    out = nbformat.read(str(tmp_path / "out.ipynb"), as_version=4)
    injected = [c for c in out.cells if "injected-parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(injected) == 1 and 'region = "EU"' in injected[0].source  # papermill's own injection
    assert not any("%%durable" in c.source for c in out.cells)
    assert "total 10" in "".join(o.get("text", "") for o in out.cells[-1].outputs)
    assert dnb.runs("report", store=store_url)["status"].tolist() == ["completed"]  # one run, ended
    # The notes stay out of the output notebook (papermill logs them instead).
    assert not [o for c in out.cells for o in c.get("outputs", []) if "durable_nb" in o.get("metadata", {})]
    assert "durable_nb: restored" in done.stderr


def test_fork_branches_the_last_run_at_the_parameters_cell(tmp_path: Path, store_url: str) -> None:
    """Issue 18 item 2: with --fork, new parameters branch the last run just before the parameters:
    the cells above are restored, the rest run with the new values; the same command again goes on
    in that fork; without --fork, new parameters start from the top."""
    side = tmp_path / "side.txt"
    note = f"open({str(side)!r}, 'a').write('{{}}\\n')"
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell(f"{note.format('setup')}\nbase = 100"),
        nbformat.v4.new_code_cell("limit = 3", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(f"{note.format('sum')}\ntotal = base + sum(range(limit))\nprint('total', total)"),
    ]
    nbformat.write(notebook, str(tmp_path / "report.ipynb"))

    def total() -> str:
        out = nbformat.read(str(tmp_path / "out.ipynb"), as_version=4)
        return "".join(o.get("text", "") for o in out.cells[-1].outputs).strip()

    assert _run(tmp_path, store_url, "-p", "limit", "3").returncode == 0
    first = dnb.runs("report", store=store_url)["run_id"].iloc[0]
    forked = _run(tmp_path, store_url, "-p", "limit", "5", "--fork")
    assert forked.returncode == 0, forked.stdout + forked.stderr[-2000:]
    assert "forked the last run of report at the parameters cell" in forked.stdout
    assert _side(tmp_path) == ["setup", "sum", "sum"]  # the cell above the parameters was restored
    assert total() == "total 110"
    runs = dnb.runs("report", store=store_url)
    assert len(runs) == 2 and runs["parent_run_id"].iloc[0] == first
    assert runs["status"].tolist() == ["completed", "completed"]
    again = _run(tmp_path, store_url, "-p", "limit", "5", "--fork")
    assert again.returncode == 0 and "forked" not in again.stdout  # the fork of these parameters goes on
    assert _side(tmp_path) == ["setup", "sum", "sum"] and len(dnb.runs("report", store=store_url)) == 2
    fresh = _run(tmp_path, store_url, "-p", "limit", "7")
    assert fresh.returncode == 0 and _side(tmp_path) == ["setup", "sum", "sum", "setup", "sum"]
    assert total() == "total 121"


def _fork_in_a_shell(store_url: str, run_id: str, fork: str) -> str:
    """Attach a real IPython shell to ``run_id``, fork there as a person would, detach; return the fork."""
    from IPython.core.interactiveshell import InteractiveShell

    from durable_nb._loop import run_sync
    from durable_nb.notebook.session import session_for

    shell = InteractiveShell()
    for line in ("%load_ext durable_nb", f"%durable run cf --id {run_id} --store {store_url}", fork):
        result = shell.run_cell(line)
        assert result.success, result.error_in_exec or result.error_before_exec
    cell_run = session_for(shell).cell_run
    run_sync(cell_run.release())
    return cell_run.run_id


def test_fork_keeps_the_overrides_of_a_fork_made_in_a_notebook(tmp_path: Path, store_url: str) -> None:
    """A fork with overrides made in a notebook, continued headless: run-notebook --fork with new
    parameters branches it at the parameters cell, and the cells restored above keep the fork's
    values, whether the fork was made below the parameters cell (its overrides are carried up to
    the new branch point) or above it (the new run is a fork of that fork)."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("alpha = 0.1", metadata={"tags": ["setup"]}),
        nbformat.v4.new_code_cell("scale = 1", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(
            "coef = alpha * 10 * scale\nprint('RESULT alpha', alpha, 'coef', coef)", metadata={"tags": ["fit"]}
        ),
    ]
    nbformat.write(notebook, str(tmp_path / "cf.ipynb"))

    def run(*extra: str) -> str:
        command = [sys.executable, "-m", "durable_nb.cli", "run-notebook", "cf.ipynb", "-o", "out.ipynb"]
        done = subprocess.run(
            [*command, "--store", store_url, *extra],
            cwd=tmp_path,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout + done.stderr[-2000:]
        out = nbformat.read(str(tmp_path / "out.ipynb"), as_version=4)
        return "".join(o.get("text", "") for o in out.cells[-1].outputs).strip()

    assert run("-p", "scale", "1") == "RESULT alpha 0.1 coef 1.0"
    first = dnb.runs("cf", store=store_url)["run_id"].iloc[0]
    below = _fork_in_a_shell(store_url, first, "%durable fork --at fit --set alpha=1.0")
    assert run("-p", "scale", "2", "--fork") == "RESULT alpha 1.0 coef 20.0"
    newest = dnb.runs("cf", store=store_url)
    assert newest["parent_run_id"].iloc[0] == first and newest["run_id"].iloc[1] == below
    above = _fork_in_a_shell(store_url, first, "%durable fork --at parameters --set alpha=2.0")
    assert run("-p", "scale", "3", "--fork") == "RESULT alpha 2.0 coef 60.0"
    assert dnb.runs("cf", store=store_url)["parent_run_id"].iloc[0] == above


def test_a_terminal_gets_a_progress_bar(tmp_path: Path, store_url: str) -> None:
    """Issue 18 item 4: on a terminal, a bar of cells done out of the total, restored vs executed."""
    _notebook(tmp_path)
    (tmp_path / "fixed").touch()
    assert _run(tmp_path, store_url, "-p", "limit", "4").returncode == 0
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "durable_nb.cli", "run-notebook", "report.ipynb", "--store", store_url]
    terminal = Terminal()
    process = subprocess.Popen(
        [*command, "-p", "limit", "4"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=terminal.fd, text=True
    )
    terminal.handed_over()
    stdout, _ = process.communicate(timeout=300)
    bar = terminal.drawn()
    assert process.returncode == 0, stdout + bar[-2000:]
    # Six cells (the injected parameters among them): five restored, the not-durable one executed.
    assert "report" in bar and "6/6" in bar and "restored 5 · executed 1" in bar, bar[-2000:]
    assert "restored from checkpoint" not in stdout  # the bar replaces the per-cell lines


def test_cell_names_are_stable_and_never_repeat() -> None:
    """Issue 18 item 1, issue 29 item 1: names from tags (the parameters cells by their role), else
    the notebook's cell id, else position and source digest; a tag met twice names only its first
    cell, so no two cells share a checkpoint."""
    from durable_nb.headless.notebook_run import cell_names

    cells = [
        nbformat.v4.new_markdown_cell("# title"),
        nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("x = 2", metadata={"tags": ["injected-parameters"]}),
        nbformat.v4.new_code_cell("y = x", metadata={"tags": ["load"]}),
        nbformat.v4.new_code_cell("z = x", metadata={"tags": ["load"]}),
        nbformat.v4.new_code_cell("print(z)"),
        nbformat.v4.new_code_cell("print(x)"),
    ]
    del cells[6]["id"]  # as in a notebook saved before nbformat 4.5
    names = cell_names(cells)
    assert names[1] == "parameters" and names[2] == "injected-parameters" and names[3] == "load"
    assert names[4].startswith("cell4_") and names[5] == f"cell-{cells[5].id}" and 0 not in names
    assert names[6].startswith("cell6_")
    assert cell_names(cells) == names  # stable


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "durable_nb.cli", *args]


def test_json_describes_the_outcome_and_a_gate_says_how_to_decide_headless(tmp_path: Path, store_url: str) -> None:
    """Issue 27 item 28: --json prints one JSON object on stdout (run, status, exit code and meaning, output,
    cells, the failed cell's error, the gate waited at and the command that decides it). Paused, the
    plain output gives that exact command (with the store) and says the same command again continues:
    no 'panel above' where there is no panel."""
    checked = f"import os\nif not os.path.exists({str(tmp_path / 'fixed')!r}):\n    raise RuntimeError('not yet')"
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [*map(nbformat.v4.new_code_cell, ["x = 1", checked, GATED])]
    nbformat.write(notebook, str(tmp_path / "report.ipynb"))

    def outcome(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
        assert done.stdout.count("\n") == 1, done.stdout + done.stderr[-2000:]  # the object, nothing else
        return dict(json.loads(done.stdout))

    failed = _run(tmp_path, store_url, "--json")
    assert failed.returncode == 1 and "a cell failed" in failed.stderr
    found = outcome(failed)
    run_id = str(dnb.runs("report", store=store_url).run_id.iloc[0])
    assert found["run_id"] == run_id and found["status"] == "failed" and found["exit_code"] == 1
    assert found["error"] == {"type": "RuntimeError", "message": "not yet"} and found["gate"] is None
    assert found["output"] == str(tmp_path / "out.ipynb") and str(found["meaning"]).startswith("failed")
    assert found["cells"] == {"total": 3, "restored": 0, "executed": 1}  # the failed cell is not counted
    (tmp_path / "fixed").touch()

    paused = _run(tmp_path, store_url)
    assert paused.returncode == 3, paused.stdout + paused.stderr[-2000:]
    decide = f"durable-nb approve {run_id} --store {shlex.quote(store_url)}"
    assert f"decide it with: {decide}" in paused.stdout
    assert "then run this same command again: it continues after the gate" in paused.stdout
    assert "panel" not in paused.stdout
    found = outcome(_run(tmp_path, store_url, "--json"))
    assert found["status"] == "paused" and found["exit_code"] == 3 and found["error"] is None
    gate = found["gate"]
    assert isinstance(gate, dict) and (gate["reason"], gate["decide"]) == ("publish?", decide)
    assert gate["node"] == f"cell-{notebook.cells[2].id}"  # the third cell, named by its cell id

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    command = _cli(*shlex.split(decide)[1:])
    approved = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert approved.returncode == 0, approved.stderr
    done = _run(tmp_path, store_url, "--json")
    assert done.returncode == 0
    found = outcome(done)
    assert (found["run_id"], found["status"], found["exit_code"], found["gate"]) == (run_id, "completed", 0, None)
    assert found["cells"] == {"total": 3, "restored": 2, "executed": 1}


def _screen(text: str) -> list[str]:
    """The lines a terminal shows: a carriage return starts its line over, writing over what was there."""
    lines = []
    for line in text.replace("\r\n", "\n").split("\n"):
        shown = ""
        for part in line.split("\r"):
            shown = part + shown[len(part) :]
        lines.append(shown.rstrip())
    return lines


def test_papermill_notes_start_on_their_own_line_above_its_bar(tmp_path: Path) -> None:
    """Issue 27 item 28: `papermill --engine durable` on a terminal: each durable_nb note is a line of its
    own above papermill's progress bar, never written after the bar on its line or after another note."""
    pytest.importorskip("papermill", reason="the engine needs papermill")
    _notebook(tmp_path)
    (tmp_path / "fixed").touch()
    env = dict(os.environ, PYTHONPATH=str(ROOT), DURABLE_NB_STORE=f"sqlite:///{tmp_path}/runs.db")
    command = [sys.executable, "-m", "papermill", "report.ipynb", "out.ipynb", "--engine", "durable", "-k", "python3"]
    screens = []
    for _ in range(2):  # the second run restores every cell: a note per cell, while the bar moves
        terminal = Terminal()
        process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=terminal.fd, stderr=terminal.fd)
        terminal.handed_over()
        assert process.wait(timeout=300) == 0
        screens.append(_screen(terminal.drawn()))
    noted = [line for screen in screens for line in screen if "durable_nb:" in line]
    assert any("restored" in line for line in noted) and any("Executing: 100%" in line for line in screens[1])
    for line in noted:
        assert line.startswith("durable_nb: ") and line.count("durable_nb:") == 1, "\n".join(screens[1])
