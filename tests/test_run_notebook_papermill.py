"""Parameters reach the notebook exactly as papermill puts them there (issue 18).

The same notebook runs with ``papermill IN OUT -p … -f params.yaml``, with ``durable-nb
run-notebook IN -o OUT -p … -f params.yaml`` and with ``papermill --engine durable``; a cell
prints each parameter's type and ``repr`` in the kernel. The injected cell must stand where
papermill's does (after the cell tagged ``parameters``, else at the top), carry its tag
``injected-parameters`` and give every parameter the value papermill gives it. The injected text
may differ (papermill writes strings with double quotes, run-notebook with ``repr``): only the
values are papermill's contract. The engine injects with papermill's own code, so its text is
papermill's to the letter. Edge values run-notebook still reads or writes otherwise (words,
non-finite floats, leading dashes, dates, a notebook injected before) are marked as known bugs.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from notebookkit import run, run_notebook_command, write_notebook

pytestmark = pytest.mark.slow
pytest.importorskip("papermill", reason="the comparison runs papermill itself")

INJECTED = "injected-parameters"
DEFAULTS = """count = 0
ratio = 0.0
big = 0
text = ''
quoted = ''
flag = False
off = True
nothing = 'set'
items = []
options = {}
"""
# -p values of each kind papermill's CLI reads (int, float, bool, None, text), and lists and
# mappings from the file; 'count' is in both, and -p wins in both tools.
QUOTED = 'it\'s "both" \\ back, é and \t tab'
CLI_PARAMETERS = [
    *("-p", "count", "3", "-p", "ratio", "0.25", "-p", "big", "12345678901234567890"),
    *("-p", "text", "hello world", "-p", "quoted", QUOTED),
    *("-p", "flag", "True", "-p", "off", "False", "-p", "nothing", "None", "-f", "params.yaml"),
]
PARAMS_YAML = """count: 99
items: [1, 2.5, three, true, null, [4, "it's"]]
options: {a: 1, nested: {b: [true, x]}, quote: 'say "hi"'}
"""


def _show(names: list[str]) -> str:
    """A cell printing each name's type and repr, one line each."""
    return f"for _name in {names!r}:\n    print(_name, type(globals()[_name]).__name__, repr(globals()[_name]))"


def _notebook(folder: Path, defaults: str, names: list[str], tagged: bool = True) -> Path:
    cells = [
        nbformat.v4.new_markdown_cell("# Parameterised"),
        nbformat.v4.new_code_cell("greeting = 'hello'"),
        nbformat.v4.new_code_cell(defaults, metadata={"tags": ["parameters"] if tagged else []}),
        nbformat.v4.new_code_cell(_show(names)),
    ]
    return write_notebook(folder / "report.ipynb", cells)


def _papermill(folder: Path, notebook: str, out: str, *args: str, **env: str) -> nbformat.NotebookNode:
    done = run([sys.executable, "-m", "papermill", notebook, out, *args, "--no-progress-bar"], folder, **env)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return nbformat.read(str(folder / out), as_version=4)


def _run_notebook(folder: Path, notebook: str, out: str, *args: str) -> nbformat.NotebookNode:
    done = run(run_notebook_command(notebook, "-o", out, *args, "--store", f"sqlite:///{folder}/runs.db"), folder)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return nbformat.read(str(folder / out), as_version=4)


def _injection(notebook: nbformat.NotebookNode) -> dict[str, Any]:
    """Where the parameters went and what each is in the kernel (from the last cell's printout)."""
    tags = [cell.metadata.get("tags", []) for cell in notebook.cells]
    printed = "".join(output.get("text", "") for output in notebook.cells[-1].outputs)
    return {
        "injected at": [index for index, cell_tags in enumerate(tags) if INJECTED in cell_tags],
        "tags": tags,
        "cell types": [cell.cell_type for cell in notebook.cells],
        "values": dict(line.split(" ", 1) for line in printed.splitlines()),
    }


def _assignments(source: str) -> list[tuple[str, Any]]:
    """The injected cell's assignments in order, each value read back from its literal."""
    lines = ast.parse(source).body
    return [(line.targets[0].id, ast.literal_eval(line.value)) for line in lines if isinstance(line, ast.Assign)]


def _source(notebook: nbformat.NotebookNode) -> str:
    (cell,) = [c for c in notebook.cells if INJECTED in c.metadata.get("tags", [])]
    return str(cell.source)


NAMES = ["count", "ratio", "big", "text", "quoted", "flag", "off", "nothing", "items", "options"]


@pytest.mark.parametrize("tagged", [True, False], ids=["after-parameters-cell", "no-parameters-cell"])
def test_parameters_take_papermills_values_and_place(tmp_path: Path, tagged: bool) -> None:
    """Issue 18: run-notebook and the durable engine inject -p/-f parameters where and as papermill does."""
    _notebook(tmp_path, DEFAULTS, NAMES, tagged)
    (tmp_path / "params.yaml").write_text(PARAMS_YAML)
    papermill = _papermill(tmp_path, "report.ipynb", "papermill.ipynb", *CLI_PARAMETERS)
    durable = _run_notebook(tmp_path, "report.ipynb", "durable.ipynb", *CLI_PARAMETERS)
    engine = _papermill(
        tmp_path, "report.ipynb", "engine.ipynb", *CLI_PARAMETERS, "--engine", "durable",
        DURABLE_NB_STORE=f"sqlite:///{tmp_path}/engine.db",
    )  # fmt: skip

    expected = _injection(papermill)
    assert expected["injected at"] == ([3] if tagged else [0])
    if tagged:  # (untagged, the defaults run after the injected cell and win, in papermill too)
        assert expected["values"]["quoted"] == f"str {QUOTED!r}"  # the test means what it says
        assert expected["values"]["count"] == "int 3" and expected["values"]["nothing"] == "NoneType None"
    assert _injection(durable) == expected
    assert _injection(engine) == expected
    assert _source(engine) == _source(papermill)  # papermill's own translator
    assert _source(durable) == _source(papermill)  # run-notebook injects with papermill's code too


# Values papermill reads or writes in its own way: each case is the same command line for both
# tools, and the kernel must see papermill's values.
EDGES = [
    pytest.param(
        # papermill's -p knows True, False and None as written; any other word is text.
        ["word", "empty", "upper"],
        ["-p", "word", "true", "-p", "empty", "null", "-p", "upper", "NONE"],
        "",
        id="words",
    ),
    pytest.param(
        # Floats with no literal: papermill writes float('nan'), float('inf'), float('-inf').
        ["high", "odd", "low", "spread"],
        ["-p", "high", "inf", "-p", "odd", "nan", "-f", "params.yaml"],
        "low: -.inf\nspread: [1.5, .inf]\n",
        id="non-finite",
    ),
    pytest.param(
        # click takes the two words after -p as they are, a leading dash too.
        ["low", "switch"],
        ["-p", "low", "-inf", "-p", "switch", "-v"],
        "",
        id="leading-dash",
    ),
    pytest.param(
        # papermill reads parameter files without YAML's timestamps: a date stays text.
        ["when", "stamp"],
        ["-f", "params.yaml"],
        "when: 2024-01-05\nstamp: 2024-01-05 10:30:00\n",
        id="dates",
    ),
]


@pytest.mark.parametrize(("names", "arguments", "params_yaml"), EDGES)
def test_edge_values_are_papermills(tmp_path: Path, names: list[str], arguments: list[str], params_yaml: str) -> None:
    """Issue 18: words, non-finite floats, leading dashes and dates in -p/-f take papermill's values."""
    _notebook(tmp_path, "".join(f"{name} = 'default'\n" for name in names), names)
    (tmp_path / "params.yaml").write_text(params_yaml)
    papermill = _papermill(tmp_path, "report.ipynb", "papermill.ipynb", *arguments)
    durable = _run_notebook(tmp_path, "report.ipynb", "durable.ipynb", *arguments)
    assert _injection(durable) == _injection(papermill)


def test_an_already_parameterized_notebook_gets_its_injected_cell_replaced(tmp_path: Path) -> None:
    """Issue 18: run on an output notebook, the new parameters replace the injected cell, as papermill does."""
    _notebook(tmp_path, "count = 0\n", ["count"])
    _papermill(tmp_path, "report.ipynb", "first.ipynb", "-p", "count", "1")
    papermill = _papermill(tmp_path, "first.ipynb", "papermill.ipynb", "-p", "count", "2")
    durable = _run_notebook(tmp_path, "first.ipynb", "durable.ipynb", "-p", "count", "2")
    assert _injection(papermill)["values"] == {"count": "int 2"}
    assert _injection(durable) == _injection(papermill)
