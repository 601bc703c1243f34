"""Issue 29 item 1: ``%durable run NAME --all`` makes every later code cell durable, no ``%%durable`` line.

Cells are named by their tag, else the notebook's cell id (sent with each execution, as JupyterLab
does), else position and digest; ``run-notebook`` names them the same way, so a run moves between
the two. Real IPython shells and real kernels; no mocks.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from kernelkit import CellResult, Kernel

import durable_nb as dnb
from durable_nb.notebook.session import session_for

pytestmark = pytest.mark.backends("sqlite")  # the store is tested on both elsewhere; one PostgreSQL case here


@pytest.fixture
def shell(store_url: str) -> Iterator[InteractiveShell]:
    ip = InteractiveShell()
    ip.run_line_magic("load_ext", "durable_nb")
    yield ip
    session = session_for(ip)
    session.all_cells.stop()
    if session.cell_run is not None:
        from durable_nb._loop import run_sync

        run_sync(session.cell_run.release())


def run(ip: InteractiveShell, source: str) -> Any:
    return ip.run_cell(source, store_history=True)


def ok(ip: InteractiveShell, source: str) -> Any:
    result = run(ip, source)
    assert result.success, result.error_in_exec or result.error_before_exec
    return result


def committed(ip: InteractiveShell) -> list[str]:
    return list(session_for(ip).require().completed)


@pytest.mark.backends("sqlite", "postgres")
def test_every_later_cell_is_durable_named_by_position(shell: InteractiveShell, store_url: str) -> None:
    """Without cell ids (a plain shell), cells are named by the order they were first seen and a digest;
    an explicit %%durable NODE wins; the --all cell itself, empty cells and other cell magics run as written."""
    ok(shell, f"%durable run demo --all --store {store_url}")
    assert ok(shell, "x = 20\nx + 1").result == 21
    assert shell.user_ns["In"][-1] == "x = 20\nx + 1"  # In[n] holds the cell's code, as for a plain cell
    ok(shell, "%%durable load\ny = x * 2")
    ok(shell, "# only a comment\n\n")
    ok(shell, "%%capture\nz = 3")
    ok(shell, f"%durable run demo --all --store {store_url}")  # run again: still not a cell of the run
    names = committed(shell)
    assert len(names) == 2 and names[1] == "load", names
    assert names[0].startswith("cell1_") and len(names[0]) == len("cell1_") + 6
    # The same cell run again restores (same name), and a new one comes next in order.
    ok(shell, "x = 20\nx + 1")
    ok(shell, "w = y + 1")
    assert committed(shell)[2].startswith("cell2_") and len(committed(shell)) == 3
    assert shell.user_ns["w"] == 41


def test_a_failing_cell_fails_as_a_plain_cell_and_the_run_records_it(shell: InteractiveShell, store_url: str) -> None:
    """The cell's result says failure (Run All stops), the run records the failed cell, the fix resumes it."""
    ok(shell, f"%durable run failing --all --store {store_url}")
    run_id = session_for(shell).require().run_id
    result = run(shell, "n = 1\nraise ValueError('bad input')")
    assert not result.success and isinstance(result.error_in_exec, ValueError)
    assert dnb.get_run(run_id, store=store_url).status == "failed"
    ok(shell, "n = 2")
    assert dnb.get_run(run_id, store=store_url).status == "running"
    assert shell.user_ns["n"] == 2


def test_durable_off_stops_and_all_starts_again(shell: InteractiveShell, store_url: str) -> None:
    """%durable off: later cells run as written, the kernel stays attached; --all again turns it back on."""
    ok(shell, f"%durable run switch --all --store {store_url}")
    ok(shell, "a = 1")
    ok(shell, "%durable off")
    ok(shell, "b = 2")
    assert len(committed(shell)) == 1 and session_for(shell).cell_run is not None
    ok(shell, f"%durable run switch --all --store {store_url}")
    ok(shell, "c = 3")
    assert len(committed(shell)) == 2


def test_bad_input_gets_a_clear_message(shell: InteractiveShell, store_url: str) -> None:
    """No name, a name that is no line of text, --all with --from-env, off when not on: usage errors that say why."""
    cases = {
        "%durable run --all": "needs the run's name",
        "%durable run '' --all": "cannot name a run",
        "%durable run --from-env --all": "drop --all",
        "%durable off": "it is not on in this kernel",
        "%durable off now": "takes nothing after it",
    }
    for line, words in cases.items():
        result = run(shell, line)
        assert isinstance(result.error_in_exec, UsageError), line
        assert words in str(result.error_in_exec), (line, str(result.error_in_exec))
    assert not session_for(shell).all_cells.enabled


def test_which_cells_run_durably_and_what_they_are_called() -> None:
    """The rules both --all and run-notebook follow: what runs as written, and a name from tag, id or position."""
    from durable_nb.notebook.all_cells import runs_durably
    from durable_nb.notebook.cell_names import cell_name, is_node_name

    assert runs_durably("x = 1") and runs_durably("!ls\nfiles = 1") and runs_durably("%matplotlib inline\nplot()")
    for plain in ("", "  \n", "# a comment\n\n# another", "%%time\nx = 1", "\n%%bash\nls", "%%durable load\nx = 1"):
        assert not runs_durably(plain), plain
    for control in ("%load_ext durable_nb\n%durable run demo --all", "%durable off", "x = 1\n%durable end"):
        assert not runs_durably(control), control
    assert cell_name(3, "x = 1", ["slow", "load.v2"]) == "slow"
    assert cell_name(3, "x = 1", ["not-durable?", "parameters"], "abc") == "parameters"
    assert cell_name(3, "x = 1", ["a b"], "3f9a-0c_1") == "cell-3f9a-0c_1"
    # An id that is not nbformat's (a VS Code cell URI) is no name: position and digest.
    assert cell_name(3, "x = 1", [], "vscode-notebook-cell:/a.ipynb#X9") == cell_name(3, "x = 1", [])
    assert cell_name(3, "x = 1", []).startswith("cell3_") and cell_name(3, "x = 2", []) != cell_name(3, "x = 1", [])
    assert all(is_node_name(n) for n in ("load.v2", "cell-" + "a" * 64, "cell3_9f2c1a"))
    assert not any(is_node_name(n) for n in ("two words", "x'); import os; ('", ""))


# -- real kernels, cells sent with their ids as JupyterLab sends them -------------------------------


def write_notebook(path: Path, sources: list[str], tags: dict[int, list[str]] | None = None) -> Any:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    for index, listed in (tags or {}).items():
        notebook.cells[index].metadata["tags"] = listed
    nbformat.write(notebook, str(path))
    return notebook


def run_all(kernel: Kernel, notebook: Any) -> list[CellResult]:
    """Run the notebook's cells in order with their ids, stopping at the first error, as Run All does."""
    results = []
    for cell in notebook.cells:
        result = kernel.run(cell.source, cell_id=cell.id)
        results.append(result)
        if result.status != "ok":
            break
    return results


def counts(path: Path) -> dict[str, int]:
    names = path.read_text().split() if path.exists() else []
    return {name: names.count(name) for name in names}


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[Kernel]]:
    kernels: list[Kernel] = []
    yield kernels
    for kernel in kernels:
        kernel.close()


def start(started: list[Kernel], folder: Path, store_url: str, notebook: Path | None = None) -> Kernel:
    env = {"DURABLE_NB_STORE": store_url}
    if notebook is not None:
        env["JPY_SESSION_NAME"] = str(notebook)  # as Jupyter's server starts a notebook's kernel
    kernel = Kernel(folder, env=env)
    started.append(kernel)
    return kernel


def nodes(store_url: str, run_id: str) -> set[str]:
    history = dnb.history(run_id, store=store_url)
    return {str(node) for node in history["node_id"].dropna()}


@pytest.mark.slow
def test_kill_then_run_all_restores_cells_named_by_id_and_tag(
    started: list[Kernel], tmp_path: Path, store_url: str
) -> None:
    """Names from the notebook file's tags and the cell ids; a not-durable cell runs as written each time;
    after SIGKILL, Run All in a new kernel restores the committed cells and runs only the killed one."""
    counter, flag = tmp_path / "counter.txt", tmp_path / "flag"
    bump = f"open({str(counter)!r}, 'a').write('{{}}\\n')"
    sources = [
        "%load_ext durable_nb\n%durable run report --all",
        f"{bump.format('load')}\nrows = list(range(10))\nprint('loaded', len(rows))",
        f"{bump.format('square')}\nsquares = [r * r for r in rows]\nsum(squares)",
        f"{bump.format('plain')}\nprint('plain cell')",
        f"{bump.format('crash')}\nimport os, pathlib\nflag = pathlib.Path({str(flag)!r})\n"
        "if not flag.exists():\n    flag.touch()\n    os.kill(os.getpid(), 9)\ntotal = sum(squares)",
        "print('done', total + 1)",
    ]
    path = tmp_path / "report.ipynb"
    notebook = write_notebook(path, sources, {1: ["load", "slow"], 3: ["not-durable"]})
    first = start(started, tmp_path, store_url, path)
    results = run_all(first, notebook)
    assert [r.status for r in results] == ["ok", "ok", "ok", "ok", "dead"], [r.text for r in results]
    assert counts(counter) == {"load": 1, "square": 1, "plain": 1, "crash": 1}
    run_id = str(dnb.runs("report", store=store_url)["run_id"].iloc[0])
    assert nodes(store_url, run_id) >= {"load", f"cell-{notebook.cells[2].id}"}

    second = start(started, tmp_path, store_url, path)
    results = run_all(second, notebook)
    assert [r.status for r in results] == ["ok"] * len(sources), [r.text for r in results]
    assert counts(counter) == {"load": 1, "square": 1, "plain": 2, "crash": 2}
    assert "loaded 10" in results[1].text and "restored 'load'" in results[1].text
    assert "285" in results[2].text and "restored" in results[2].text
    assert "plain cell" in results[3].text and "restored" not in results[3].text
    assert "done 286" in results[5].text
    assert nodes(store_url, run_id) >= {
        "load",
        f"cell-{notebook.cells[2].id}",
        f"cell-{notebook.cells[4].id}",
        f"cell-{notebook.cells[5].id}",
    }
    assert not any(
        node.startswith("cell3") or node == f"cell-{notebook.cells[3].id}" for node in nodes(store_url, run_id)
    )


@pytest.mark.slow
def test_tags_sent_by_the_front_end_name_the_cell(started: list[Kernel], tmp_path: Path, store_url: str) -> None:
    """KernelSession.note_cell_info (what the cell-info comm message calls) gives a cell its tags, else the
    notebook file does; a tag another cell has names only that cell."""
    path = tmp_path / "tagged.ipynb"
    notebook = write_notebook(path, ["a = 1", "b = 2"], {0: ["alpha"]})
    kernel = start(started, tmp_path, store_url, path)
    assert kernel.run("%load_ext durable_nb\n%durable run tagged --all").status == "ok"
    # Silent, as a comm handler's work is: it is not a cell of the run.
    note = "from durable_nb.notebook.session import session_for\n"
    note += "session_for(get_ipython()).note_cell_info('c-2', ['train', 'x'])\n"
    note += "session_for(get_ipython()).note_cell_info('c-3', ['not-durable'])\n"
    note += "session_for(get_ipython()).note_cell_info('c-5', ['train'])"
    kernel.client.execute(note, silent=True)
    assert kernel.run("model = 'fitted'", cell_id="c-2").status == "ok"
    assert kernel.run("scratch = 1", cell_id="c-3").status == "ok"
    assert kernel.run("score = 0.9", cell_id="c-4").status == "ok"
    assert kernel.run("again = 'fitted'", cell_id="c-5").status == "ok"  # 'train' is c-2's: named by its id
    # Without tags sent, the notebook file's: read again once the file changed.
    assert kernel.run("a = 1", cell_id=notebook.cells[0].id).status == "ok"
    notebook.cells[1].metadata["tags"] = ["beta"]
    nbformat.write(notebook, str(path))
    assert kernel.run("b = 2", cell_id=notebook.cells[1].id).status == "ok"
    run_id = str(dnb.runs("tagged", store=store_url)["run_id"].iloc[0])
    assert nodes(store_url, run_id) == {"train", "cell-c-4", "cell-c-5", "alpha", "beta"}


@pytest.mark.slow
def test_editing_a_cell_forks_and_a_gate_pauses(started: list[Kernel], tmp_path: Path, store_url: str) -> None:
    """A cell keeps its name (its id) when edited: running the edit forks the run, undoing it goes back.
    A syntax error reads as a plain cell's; a gate stops Run All without a traceback, as with %%durable."""
    kernel = start(started, tmp_path, store_url)
    assert kernel.run("%load_ext durable_nb\nimport durable_nb as dnb\n%durable run edits --all").status == "ok"
    assert kernel.run("rate = 0.1", cell_id="rate").status == "ok"
    assert kernel.run("cost = rate * 100", cell_id="cost").status == "ok"
    original = str(dnb.runs("edits", store=store_url)["run_id"].iloc[0])
    edited = kernel.run("rate = 0.2", cell_id="rate")
    assert edited.status == "ok" and "fork" in edited.text, edited.text
    runs = dnb.runs("edits", store=store_url)
    fork = runs[runs["run_id"] != original].iloc[0]
    assert fork["parent_run_id"] == original
    back = kernel.run("rate = 0.1", cell_id="rate")  # the edit undone: back to the run that ran this code
    assert back.status == "ok" and f"continuing there (switch back with %durable switch {fork['run_id']})" in back.text
    kernel.run("rate = 0.2", cell_id="rate")  # and forward again, to the fork
    broken = kernel.run("if rate:\nprint(rate)", cell_id="broken")  # shown as a plain cell's syntax error
    shown = re.sub(r"\x1b\[[0-9;]*m", "", "".join(broken.outputs[-1]["traceback"]))
    assert broken.status == "error" and "IndentationError: expected an indented block" in shown, shown
    assert "Cell In[" in shown and "run_cell_magic" not in shown and "File " not in shown, shown
    gated = kernel.run("decision = dnb.gate('ship?', {'rate': rate})\nshipped = decision.approved", cell_id="ship")
    assert gated.status == "error" and gated.error == "GatePending"
    assert "Traceback" not in gated.text
    assert dnb.get_run(fork["run_id"], store=store_url).status == "paused"


@pytest.mark.slow
def test_a_headless_run_continues_in_a_kernel(started: list[Kernel], tmp_path: Path, store_url: str) -> None:
    """run-notebook names cells as --all does: a headless run paused at a gate is opened in a kernel with
    %durable run NAME --all, its cells restore, and the gate is decided and continued there."""
    from durable_nb.headless import run_notebook

    counter = tmp_path / "counter.txt"
    bump = f"open({str(counter)!r}, 'a').write('{{}}\\n')"
    sources = [
        "%load_ext durable_nb\nimport durable_nb as dnb\n%durable run report --all",
        f"{bump.format('load')}\nrows = [1, 2, 3]\nprint('loaded', len(rows))",
        f"{bump.format('review')}\nok = dnb.gate('publish?', {{'rows': rows}}).approved",
        "print('published' if ok else 'held')",
    ]
    path = tmp_path / "report.ipynb"
    notebook = write_notebook(path, sources, {0: ["not-durable"]})
    outcome = run_notebook(path, store=store_url, say=lambda line: None)
    assert outcome.exit_code == 3 and outcome.run is not None  # paused at the gate
    run_id = outcome.run.run_id
    assert counts(counter) == {"load": 1, "review": 1}

    kernel = start(started, tmp_path, store_url, path)
    results = run_all(kernel, notebook)
    assert [r.status for r in results] == ["ok", "ok", "error"], [r.text for r in results]
    assert run_id in results[0].text  # attached to the headless run
    assert "loaded 3" in results[1].text and "restored" in results[1].text
    assert results[2].error == "GatePending"
    dnb.approve(run_id, by="ana", store=store_url)
    results = run_all(kernel, notebook)
    assert [r.status for r in results] == ["ok"] * len(sources), [r.text for r in results]
    assert "published" in results[3].text
    assert counts(counter) == {"load": 1, "review": 2}  # a gate's cell runs again from its top once decided


@pytest.mark.slow
def test_a_kernel_run_continues_headless_then_restores_in_a_kernel(
    started: list[Kernel], tmp_path: Path, store_url: str
) -> None:
    """The reverse: a run begun in a kernel with --all (keyed by its notebook file, as run-notebook keys it)
    is continued by run-notebook, which restores the kernel's cells; a new kernel then restores them all."""
    from durable_nb.headless import run_notebook

    counter, fixed = tmp_path / "counter.txt", tmp_path / "fixed"
    bump = f"open({str(counter)!r}, 'a').write('{{}}\\n')"
    sources = [
        "%load_ext durable_nb\n%durable run report --all",
        f"{bump.format('load')}\nrows = [1, 2, 3]\nprint('loaded', len(rows))",
        f"{bump.format('check')}\nimport os\nif not os.path.exists({str(fixed)!r}):\n"
        "    raise RuntimeError('not yet')\ntotal = sum(rows)",
        "print('total', total)",
        "%durable end",
    ]
    path = tmp_path / "report.ipynb"
    notebook = write_notebook(path, sources)
    kernel = start(started, tmp_path, store_url, path)
    results = run_all(kernel, notebook)
    assert [r.status for r in results] == ["ok", "ok", "error"] and results[2].error == "RuntimeError"
    failed = results[2].outputs[-1]
    assert failed["type"] == "error"
    shown = re.sub(r"\x1b\[[0-9;]*m", "", "".join(failed["traceback"]))
    assert "run_cell_magic" not in shown and "hidden" not in shown, shown
    assert "Cell In[3], line 4" in shown  # as a plain cell's traceback reads
    run_id = str(dnb.runs("report", store=store_url)["run_id"].iloc[0])
    kernel.close()
    started.remove(kernel)

    fixed.touch()
    outcome = run_notebook(path, store=store_url, say=lambda line: None)
    assert outcome.exit_code == 0 and outcome.run is not None and outcome.run.run_id == run_id
    assert outcome.tally is not None and outcome.tally.restored == 1
    assert counts(counter) == {"load": 1, "check": 2}

    again = start(started, tmp_path, store_url, path)
    results = run_all(again, notebook)
    assert [r.status for r in results] == ["ok"] * len(sources), [r.text for r in results]
    assert run_id in results[0].text and "completed" in results[0].text
    assert "total 6" in results[3].text and "restored" in results[3].text
    assert counts(counter) == {"load": 1, "check": 2}
