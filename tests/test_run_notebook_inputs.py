"""run-notebook takes names, paths, store URLs and parameters as data, never as code (issue 27 items 5, 6, 13).

Real kernels through the command line, in child processes. A ``--run`` name, a notebook's file
name and folder, a store URL and parameters holding spaces, quotes, newlines, ``#``, ``;``,
``$(…)``, backticks, backslashes and non-ASCII text either work (the right notebook runs, on the
right store, under that run name, and the same command resumes it) or are refused with exit code 2
before any kernel starts. Every hostile text tries to create a file named MARKER; none may appear.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from notebookkit import child_env, run, run_here, run_notebook_command, write_notebook

import durable_nb as dnb

# run-notebook on SQLite: its PostgreSQL case is in test_run_notebook.py, the store's in the conformance tests.
pytestmark = [pytest.mark.slow, pytest.mark.backends("sqlite")]

MARK = "touch MARKER; open('MARKER', 'w')"
HOSTILE = f"a b 'single' \"double\" #; $({MARK}) `{MARK}` \\ é ü 日本"
HOSTILE_VALUE = f"line one\nline two {HOSTILE}\\n\"); open('MARKER', 'w') #"


def _markers(root: Path) -> list[Path]:
    return list(root.rglob("MARKER"))


def _echo(path: Path) -> Path:
    return write_notebook(path, [nbformat.v4.new_code_cell("print('echo ran')")])


def _printed(path: Path) -> str:
    notebook = nbformat.read(str(path), as_version=4)
    return "".join(o.get("text", "") for c in notebook.cells for o in c.get("outputs", []))


def test_the_issues_reproductions_execute_nothing(tmp_path: Path) -> None:
    """The two commands of the issue, as a shell runs them: the --run name and the notebook's file name
    with a newline and code after it are refused (exit 2), nothing runs and no MARKER appears; the
    same notebook under a plain --run name runs."""
    _echo(tmp_path / "echo.ipynb")
    stem = tmp_path / "nb\nopen('MARKER','w').write('stem') #.ipynb"
    _echo(stem)
    store = f"sqlite:///{tmp_path}/rn/runs.db"  # the issue's /tmp/rn, inside this test's folder
    shell = f'durable-nb() {{ {shlex.quote(sys.executable)} -m durable_nb.cli "$@"; }}\n'
    by_run = (
        f"durable-nb run-notebook echo.ipynb -o o.ipynb --store {store} "
        """--run "$(printf 'x\\nopen("MARKER","w").write("run") #')\""""
    )
    done = run(["bash", "-c", shell + by_run], tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("error: The run name 'x\\nopen(") and "--run" in done.stderr, done.stderr
    by_stem = f"durable-nb run-notebook nb*.ipynb -o o.ipynb --store {store}"
    done = run(["bash", "-c", shell + by_stem], tmp_path)
    assert done.returncode == 2 and "give the run a name with --run NAME" in done.stderr, done.stdout + done.stderr
    assert not (tmp_path / "rn").exists()  # refused before the store or a kernel was touched
    named = run(["bash", "-c", shell + by_stem + " --run stem"], tmp_path)
    assert named.returncode == 0, named.stdout + named.stderr
    assert "echo ran" in _printed(tmp_path / "o.ipynb")
    assert dnb.runs("stem", store=store)["status"].tolist() == ["completed"]
    assert _markers(tmp_path) == []


def test_spaces_in_the_store_and_the_run_name_work(tmp_path: Path) -> None:
    """Issue 27 item 6: --store "sqlite:////…/a b/runs.db" and --run "a b" run, and the same command resumes."""
    _echo(tmp_path / "echo.ipynb")
    store = f"sqlite:///{tmp_path}/a b/runs.db"
    command = run_notebook_command("echo.ipynb", "-o", "o.ipynb", "--store", store, "--run", "a b")
    first = run_here(command, tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    again = run_here(command, tmp_path)
    assert again.returncode == 0 and "restored from checkpoint" in again.stdout, again.stdout + again.stderr
    assert dnb.runs("a b", store=store)["status"].tolist() == ["completed"]


def _hostile_notebook(folder: Path) -> Path:
    effect = "open('effects.txt', 'a').write('{}\\n')"
    cells = [
        nbformat.v4.new_code_cell("text = ''\ncount = 0\nnested = {}", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(
            f"import json, os\n{effect.format('record')}\n"
            "json.dump({'text': text, 'count': count, 'nested': nested, 'cwd': os.getcwd()}, open('seen.json', 'w'))"
        ),
        nbformat.v4.new_code_cell(
            f"{effect.format('check')}\nif not os.path.exists('fixed'):\n    raise RuntimeError('not yet')"
        ),
        nbformat.v4.new_code_cell(f"{effect.format('end')}\nprint('done', count)"),
    ]
    return write_notebook(folder / f"note {HOSTILE}.ipynb", cells)


def test_hostile_names_paths_stores_and_parameters_are_data(tmp_path: Path, store_url: str) -> None:
    """A run name, notebook file name, folder (with a newline), SQLite store path and parameters full of
    quotes, newlines, '#', ';', '$(…)', backticks, backslashes and non-ASCII: the notebook runs in its
    folder with exactly those parameter values, on that store under that name; a failed cell resumes
    with the same command (the cell before it is restored, not run again); nothing else executes."""
    folder = tmp_path / f"dir {HOSTILE}\nopen('MARKER', 'w') #"
    folder.mkdir()
    notebook = _hostile_notebook(folder)
    if store_url.startswith("sqlite"):
        store_url = f"sqlite:///{folder}/store {HOSTILE}/runs.db"
    (folder / "params.yaml").write_text(
        yaml_text := json.dumps({"nested": {HOSTILE: [HOSTILE_VALUE, "\\", None, 1.5]}}), encoding="utf-8"
    )
    output = folder / f"out {HOSTILE}.ipynb"
    command = run_notebook_command(
        str(notebook), "-o", str(output), "--store", store_url, "--run", HOSTILE,
        "-p", "text", HOSTILE_VALUE, "-p", "count", "3", "-f", str(folder / "params.yaml"),
    )  # fmt: skip
    failed = run_here(command, tmp_path)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "a cell failed (RuntimeError: not yet)" in failed.stdout
    (folder / "fixed").touch()
    done = run_here([*command, "--json"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["name"] == HOSTILE and outcome["status"] == "completed" and outcome["exit_code"] == 0
    assert outcome["output"] == str(output) and outcome["cells"] == {"total": 5, "restored": 3, "executed": 2}
    assert (folder / "effects.txt").read_text().split() == ["record", "check", "check", "end"]
    seen = json.loads((folder / "seen.json").read_text(encoding="utf-8"))
    assert seen == {"text": HOSTILE_VALUE, "count": 3, "nested": json.loads(yaml_text)["nested"], "cwd": str(folder)}
    runs = dnb.runs(HOSTILE, store=store_url)
    assert runs["run_id"].tolist() == [outcome["run_id"]] and runs["status"].tolist() == ["completed"]
    assert "done 3" in _printed(output)
    assert _markers(tmp_path) == []


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _unix_socket(path: Path) -> socket.socket:
    bound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bound.bind(str(path))
    return bound


REFUSED = [
    pytest.param(["{echo}", "-p", "class", "1"], "not a keyword", id="keyword-parameter"),
    pytest.param(["{echo}", "-p", "None", "1"], "not a keyword", id="keyword-none-parameter"),
    pytest.param(["{echo}", "-p", "a=b", "c"], "'a=b'", id="equals-in-parameter-name"),
    pytest.param(["{echo}", "-p", "1x", "c"], "'1x'", id="parameter-name-not-an-identifier"),
    pytest.param(["{echo}", "-f", "{python_tag}"], "!!python", id="parameters-file-python-tag"),
    pytest.param(["{echo}", "-f", "{set_tag}"], "type set", id="parameters-file-set-tag"),
    pytest.param(["{echo}", "-f", "{binary_tag}"], "type bytes", id="parameters-file-binary-tag"),
    pytest.param(["{echo}", "-f", "{fifo}"], "is a fifo", id="parameters-file-fifo"),
    pytest.param(["/dev/zero"], "character device", id="notebook-dev-zero"),
    pytest.param(["{fifo}"], "is a fifo", id="notebook-fifo"),
    pytest.param(["{folder}"], "is a folder", id="notebook-folder"),
    pytest.param(["{socket}"], "is a socket", id="notebook-socket"),
    pytest.param(["{echo}", "--run", ""], "cannot be empty", id="run-name-empty"),
    pytest.param(["{echo}", "--run", "x\rprint(1)"], "control characters", id="run-name-carriage-return"),
    pytest.param(["{echo}", "-o", "{folder}"], "is a folder", id="output-folder"),
    pytest.param(["{echo}", "-o", "{fifo}"], "is a fifo", id="output-fifo"),
    pytest.param(["{echo}", "--store", "sqlite:///:memory:"], "in-memory", id="store-in-memory"),
]


@pytest.mark.parametrize(("argv", "fragment"), REFUSED)
def test_refused_before_any_kernel_starts(tmp_path: Path, argv: list[str], fragment: str) -> None:
    """Issue 27 item 13: exit 2, one 'error:' line saying what to do, no store made, nothing run, no
    hang on a FIFO or a device (the notebook's one cell would write MARKER)."""
    folder = tmp_path / "work"
    folder.mkdir()
    notebook = write_notebook(folder / "echo.ipynb", [nbformat.v4.new_code_cell(f"open('MARKER', 'w')  # {MARK}")])
    (folder / "python.yaml").write_text("x: !!python/object/apply:os.system ['touch MARKER']\n")
    (folder / "set.yaml").write_text('x: !!set {\'"); open("MARKER", "w") #\': null}\n')
    (folder / "binary.yaml").write_text("x: !!binary aGk=\n")
    names = {
        "echo": str(notebook),
        "python_tag": str(folder / "python.yaml"),
        "set_tag": str(folder / "set.yaml"),
        "binary_tag": str(folder / "binary.yaml"),
        "fifo": str(_fifo(folder / "pipe")),
        "folder": str(folder),
        "socket": str(folder / "s.sock"),
    }
    with _unix_socket(folder / "s.sock"):
        args = [part.format(**names) for part in argv]
        store = [] if "--store" in args else ["--store", f"sqlite:///{folder}/runs.db"]
        done = run_here(run_notebook_command(*args, *store), folder)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == "" and done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert fragment.lower() in done.stderr.lower()
    assert not (folder / "runs.db").exists() and _markers(tmp_path) == []


def test_json_errors_name_the_type(tmp_path: Path) -> None:
    """With --json a refusal is one JSON object on stderr naming InvalidNotebookRun and exit code 2."""
    _echo(tmp_path / "echo.ipynb")
    done = run_here(run_notebook_command("echo.ipynb", "-p", "class", "1", "--json"), tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    error = json.loads(done.stderr)["error"]
    assert error["type"] == "InvalidNotebookRun" and error["exit_code"] == 2


def test_the_handover_never_reaches_the_notebooks_processes(tmp_path: Path) -> None:
    """The run's name, key and store travel in $DURABLE_NB_ATTACH, read once and removed: a process the
    notebook starts does not inherit them."""
    cells = [nbformat.v4.new_code_cell("import os\nprint('handover', repr(os.environ.get('DURABLE_NB_ATTACH')))")]
    write_notebook(tmp_path / "env.ipynb", cells)
    done = subprocess.run(
        run_notebook_command("env.ipynb", "-o", "out.ipynb", "--store", f"sqlite:///{tmp_path}/runs.db"),
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "handover None" in _printed(tmp_path / "out.ipynb")


def test_from_env_attaches_a_shell_to_the_run_it_is_handed(
    tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a real IPython shell, '%durable run --from-env' attaches to the run named in $DURABLE_NB_ATTACH (any
    text: it is read as data), in the store named there, under its key, and removes the variable."""
    from IPython.core.interactiveshell import InteractiveShell

    from durable_nb._loop import run_sync
    from durable_nb.notebook.handover import ATTACH_CODE, ATTACH_VARIABLE, Handover
    from durable_nb.notebook.session import session_for

    if store_url.startswith("sqlite"):
        store_url = f"sqlite:///{tmp_path}/store {HOSTILE}\nx/runs.db"
    monkeypatch.chdir(tmp_path)
    handover = Handover(HOSTILE_VALUE, "the key", store_url).environment({})[ATTACH_VARIABLE]
    monkeypatch.setenv(ATTACH_VARIABLE, handover)
    shell = InteractiveShell()
    for line in ATTACH_CODE.splitlines():
        result = shell.run_cell(line)
        assert result.success, result.error_in_exec or result.error_before_exec
    session = session_for(shell)
    try:
        run = dnb.get_run(session.attached_run_id or "", store=store_url).record
        assert (run.name, run.idempotency_key, run.status.value) == (HOSTILE_VALUE, "the key", "running")
        assert ATTACH_VARIABLE not in os.environ
        assert _markers(tmp_path) == []
    finally:
        assert session.cell_run is not None
        run_sync(session.cell_run.release())


def test_the_papermill_engine_takes_hostile_paths_and_stores_as_data(tmp_path: Path) -> None:
    """`papermill --engine durable` on a notebook whose file name, folder (with a newline), SQLite store
    path and parameters are full of quotes, '#', ';', '$(…)' and non-ASCII: it runs under the file's name
    on that store, a failed cell resumes with the same command, and nothing else executes."""
    pytest.importorskip("papermill", reason="the engine needs papermill")
    folder = tmp_path / f"dir {HOSTILE}\nopen('MARKER', 'w') #"
    folder.mkdir()
    notebook = _hostile_notebook(folder)
    store = f"sqlite:///{folder}/store {HOSTILE}/runs.db"
    command = [
        sys.executable, "-m", "papermill", notebook.name, "out.ipynb", "--engine", "durable", "--no-progress-bar",
        "-p", "text", HOSTILE_VALUE, "-p", "count", "3",
    ]  # fmt: skip
    failed = run(command, folder, DURABLE_NB_STORE=store)
    assert failed.returncode != 0 and "not yet" in failed.stderr, failed.stderr[-3000:]
    (folder / "fixed").touch()
    done = run(command, folder, DURABLE_NB_STORE=store)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (folder / "effects.txt").read_text().split() == ["record", "check", "check", "end"]
    seen = json.loads((folder / "seen.json").read_text(encoding="utf-8"))
    assert (seen["text"], seen["count"], seen["cwd"]) == (HOSTILE_VALUE, 3, str(folder))
    assert dnb.runs(notebook.stem, store=store)["status"].tolist() == ["completed"]
    assert _markers(tmp_path) == []
