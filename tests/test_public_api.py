"""The public surface: __all__, layering, light import, documented names."""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import env_with_repo

import durable_nb as dnb

PACKAGE = Path(dnb.__file__).parent
FRONT_END_ONLY = {"IPython", "ipywidgets", "pandas", "ipykernel"}


def test_all_matches_exports() -> None:
    """__all__ lists exactly the public names the package exports."""
    # dir(): most names are imported on first use, so they are not in vars() until then.
    public = {name for name in dir(dnb) if not name.startswith("_") and not inspect.ismodule(getattr(dnb, name))}
    assert set(dnb.__all__) - {"__version__"} == public
    assert len(dnb.__all__) == len(set(dnb.__all__))


def test_every_error_is_a_durable_error_with_a_docstring() -> None:
    """One base class, one documented subclass per failure mode, all importable from durable_nb."""
    errors = [
        getattr(dnb, n)
        for n in dnb.__all__
        if isinstance(getattr(dnb, n), type) and issubclass(getattr(dnb, n), Exception)
    ]
    assert len(errors) >= 15
    for error in errors:
        assert issubclass(error, dnb.DurableError)
        assert error.__doc__ and error.__doc__.strip()


def test_public_callables_have_docstrings() -> None:
    """Style: every public function has a one-line docstring."""
    for name in dnb.__all__:
        value = getattr(dnb, name)
        if inspect.isfunction(value) or inspect.isclass(value):
            assert value.__doc__, name


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_engine_and_store_import_no_front_end_library() -> None:
    """The engine, the store and the model never import IPython, ipywidgets or pandas."""
    core = [PACKAGE / "errors.py", PACKAGE / "_ids.py", PACKAGE / "_loop.py"]
    for layer in ("model", "engine", "store"):
        core += list((PACKAGE / layer).rglob("*.py"))
    for path in core:
        assert not (_imports(path) & FRONT_END_ONLY), path


def printed(code: str, *args: str) -> Any:
    """What a fresh Python process running ``code`` printed last, as JSON."""
    result = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env_with_repo(), check=True
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def loaded(setup: str, heavy: tuple[str, ...], *args: str) -> list[str]:
    """The modules of ``heavy`` (or inside them) that a fresh Python process has loaded after ``setup``."""
    return printed(
        f"{setup}\nimport json, sys\nheavy = {heavy!r}\nwithin = tuple(h + '.' for h in heavy)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m in heavy or m.startswith(within))))",
        *args,
    )


def test_import_is_light() -> None:
    """`import durable_nb` loads no IPython, ipywidgets or pandas, and works in a plain script."""
    assert loaded("import durable_nb", ("IPython", "ipywidgets", "pandas")) == []


def test_import_loads_neither_the_engine_nor_the_store_nor_an_event_loop() -> None:
    """`import durable_nb` loads the errors and the store's entry point only (the rest on first use)."""
    heavy = ("asyncio", "sqlite3", "cloudpickle", "durable_nb._loop", "durable_nb.model", "durable_nb.engine")
    heavy += ("durable_nb.store.protocol", "durable_nb.store.sqlite", "durable_nb.notebook")
    assert loaded("import durable_nb", heavy) == []


SHELL = "from IPython.core.interactiveshell import InteractiveShell\nshell = InteractiveShell()\n"


def test_loading_the_extension_only_registers() -> None:
    """`%load_ext durable_nb` registers the magics and loads no engine, store backend, model,
    widgets, views, service, headless runs, LangGraph, dask or pandas."""
    setup = (
        f"{SHELL}shell.run_line_magic('load_ext', 'durable_nb')\nmagics = shell.magics_manager.magics\n"
        "assert 'durable' in magics['line'] and 'durable' in magics['cell']"
    )
    heavy = ("durable_nb.engine", "durable_nb.model", "durable_nb.store.protocol", "durable_nb.store.sqlite")
    heavy += ("durable_nb.store.postgres", "durable_nb.notebook.session", "durable_nb.widgets", "durable_nb.views")
    heavy += ("durable_nb.service", "durable_nb.headless", "durable_nb.langgraph", "cloudpickle", "ipywidgets")
    heavy += ("pandas", "numpy", "dask", "psycopg", "langgraph")
    assert loaded(setup, heavy) == []


def test_loading_the_extension_builds_no_argument_parser_and_the_help_still_shows() -> None:
    """`%load_ext durable_nb` builds no magic's parser; `%%durable?` formats the cell magic's help when asked."""
    code = (
        f"import json\n{SHELL}shell.run_line_magic('load_ext', 'durable_nb')\n"
        "from durable_nb.notebook.magics import DurableMagics\n"
        "built = [n for n, f in vars(DurableMagics).items() if hasattr(f, 'parser')]\n"
        "print(json.dumps([built, shell.object_inspect_text('%%durable')]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env_with_repo(), check=True
    )
    built, help_text = json.loads(result.stdout.strip().splitlines()[-1])
    assert built == []
    assert "--retries RETRIES" in help_text and "Run the cell durably" in help_text and "node" in help_text


def test_loading_the_extension_and_attaching_import_only_what_a_cell_needs(tmp_path: Path) -> None:
    """`%load_ext durable_nb`, `%durable run` and a first committed cell load no agents, forks, views,
    service client, OpenTelemetry, numpy or pandas, no gate's or report's records, nothing of cancelling
    or settling a run: a kernel pays for them only when it uses them."""
    setup = (
        f"import sys\n{SHELL}shell.run_line_magic('load_ext', 'durable_nb')\n"
        "assert shell.run_cell(f'%durable run light --store sqlite:///{sys.argv[1]}/runs.db').success\n"
        "assert shell.run_cell('%%durable first\\nx = 1').success"
    )
    heavy = ("durable_nb.engine.agents.journal", "durable_nb.engine.agents.loop", "durable_nb.views")
    heavy += ("durable_nb.service", "durable_nb.headless")
    heavy += ("durable_nb.langgraph", "durable_nb.store.postgres", "durable_nb.engine.forks.forking")
    heavy += ("durable_nb.engine.forks.literals", "durable_nb.widgets", "opentelemetry", "typing_extensions")
    heavy += ("durable_nb.model.gates", "durable_nb.model.reports", "durable_nb.engine.gates.resume")
    heavy += ("durable_nb.engine.runs.cancel", "durable_nb.engine.runs.settle", "durable_nb.engine.runs.watch")
    heavy += ("durable_nb.engine.state.drafts",)
    heavy += ("numpy", "pandas", "ipywidgets", "dask", "psycopg")
    assert loaded(setup, heavy, str(tmp_path)) == []


def test_attaching_loads_nothing_of_running_a_cell(tmp_path: Path) -> None:
    """`%load_ext durable_nb` and `%durable run --all` load none of what runs a cell's code, reads the settings
    it changed and shows what it restores: the first cell loads them."""
    setup = (
        f"import sys\n{SHELL}shell.run_line_magic('load_ext', 'durable_nb')\n"
        "assert shell.run_cell(f'%durable run light --all --store sqlite:///{sys.argv[1]}/runs.db').success"
    )
    cell = ("durable_nb.notebook.executing", "durable_nb.notebook.outcome", "durable_nb.notebook.settings")
    cell += ("durable_nb.notebook.restored", "durable_nb.notebook.capture", "durable_nb.engine.cells.plan")
    assert loaded(setup, cell, str(tmp_path)) == []


def test_attaching_and_a_first_cell_load_no_magic_argument_parser(tmp_path: Path) -> None:
    """`%load_ext durable_nb`, `%durable run NAME --all` (its store from the environment, as in a
    kernel) and cells named by a word build no argument parser: IPython's magic_arguments module is
    not even loaded (a magic line with a value loads it)."""
    setup = (
        "import os, sys\nos.environ['DURABLE_NB_STORE'] = f'sqlite:///{sys.argv[1]}/runs.db'\n"
        f"{SHELL}shell.run_line_magic('load_ext', 'durable_nb')\n"
        "assert shell.run_cell('%durable run light --all').success\n"
        "assert shell.run_cell('%%durable first\\nx = 1').success\n"
        "assert shell.run_cell('x = 2').success"
    )
    assert loaded(setup, ("IPython.core.magic_arguments",), str(tmp_path)) == []
    retried = f"{setup}\nassert shell.run_cell('%%durable again --retries 1\\nx = 3').success"
    assert loaded(retried, ("IPython.core.magic_arguments",), str(tmp_path)) == ["IPython.core.magic_arguments"]


def test_typed_marker_ships() -> None:
    """Style: the package ships py.typed."""
    assert (PACKAGE / "py.typed").exists()


# What attaching and a first cell define, as dataclasses: the model's records. Each costs about half
# a millisecond to define (its generated methods are compiled one by one), so records made only on
# the way (a cell's plan, options, outcome) are plain classes or NamedTuples; raise this only for a
# record that needs what a dataclass gives.
DATACLASSES_AT_ATTACH = 11


def test_attaching_and_a_first_cell_define_few_dataclasses(tmp_path: Path) -> None:
    """`%load_ext durable_nb`, `%durable run` and a first cell define at most DATACLASSES_AT_ATTACH dataclasses."""
    code = (
        f"import dataclasses, json, sys\n{SHELL}shell.run_line_magic('load_ext', 'durable_nb')\n"
        "assert shell.run_cell(f'%durable run light --store sqlite:///{sys.argv[1]}/runs.db').success\n"
        "assert shell.run_cell('%%durable first\\nx = 1').success\n"
        "print(json.dumps(sorted(f'{name}.{value.__qualname__}' for name, module in list(sys.modules.items())"
        " if name.startswith('durable_nb') for value in vars(module).values()"
        " if isinstance(value, type) and value.__module__ == name and dataclasses.is_dataclass(value))))"
    )
    defined = printed(code, str(tmp_path))
    assert len(defined) <= DATACLASSES_AT_ATTACH, defined


# How many methods dataclasses compiles (one exec each, about 0.1 ms) while attaching and running a
# first cell: the records' comparison, repr and freezing are written once, in their common base.
DATACLASS_METHODS_AT_ATTACH = 15


def test_attaching_and_a_first_cell_compile_few_dataclass_methods(tmp_path: Path) -> None:
    """The records' methods are not compiled per class: at most DATACLASS_METHODS_AT_ATTACH are."""
    code = (
        "import dataclasses, json, sys\nmade = []\nreal = dataclasses._create_fn\n"
        "dataclasses._create_fn = lambda name, *a, **k: made.append(name) or real(name, *a, **k)\n"
        f"{SHELL}shell.run_line_magic('load_ext', 'durable_nb')\n"
        "assert shell.run_cell(f'%durable run light --store sqlite:///{sys.argv[1]}/runs.db').success\n"
        "assert shell.run_cell('%%durable first\\nx = 1').success\nprint(json.dumps(made))"
    )
    made = printed(code, str(tmp_path))
    assert len(made) <= DATACLASS_METHODS_AT_ATTACH, made


def test_records_loaded_on_first_use_keep_their_old_paths() -> None:
    """Values pickled before name Decision, PendingInterrupt, EventRecord, StatusRows, PruneReport and
    Resume by the modules that defined them then: those names still give the same classes."""
    from durable_nb.engine.gates import gate, resume
    from durable_nb.model import commits, gates, records, reports

    assert records.Decision is gates.Decision and records.PendingInterrupt is gates.PendingInterrupt
    assert records.EventRecord is reports.EventRecord and records.StatusRows is reports.StatusRows
    assert commits.PruneReport is reports.PruneReport is dnb.PruneReport
    assert gate.Resume is resume.Resume is dnb.Resume


# How many of durable_nb's modules attaching and a first cell load. Each costs a kernel about 0.1 ms
# (finding, reading and running it) besides what it defines; a module that only a rarer path needs
# (a gate's decision, a cancel, a failed commit) is imported in that path instead. The first
# cell's commit loads the library-singleton index, to take the modules a cell imported as it ends,
# and the collector's pause, which pickling and loading values hold; pickling a value asks whether
# statsmodels' model data is among what it meets (its formula's names are stored with it). A
# cell's code and a restore's unpickling run with room on the frame stack (``_frame_room``). Two
# modules save far more than their loading: the named tuples' base (_tuples), a third of making
# each of fourteen, and the records' compiled __init__ (model._inits), parsing eleven at import.
MODULES_AT_ATTACH = 96


def test_attaching_and_a_first_cell_load_few_modules(tmp_path: Path) -> None:
    """`%load_ext durable_nb`, `%durable run` and a first cell load at most MODULES_AT_ATTACH modules of ours."""
    setup = (
        f"import sys\n{SHELL}shell.run_line_magic('load_ext', 'durable_nb')\n"
        "assert shell.run_cell(f'%durable run light --store sqlite:///{sys.argv[1]}/runs.db').success\n"
        "assert shell.run_cell('%%durable first\\nx = 1').success"
    )
    found = loaded(setup, ("durable_nb",), str(tmp_path))
    assert len(found) <= MODULES_AT_ATTACH, found


def test_a_first_cell_leaves_numpy_random_unloaded(tmp_path: Path) -> None:
    """A notebook that imported numpy but never used numpy.random: a first cell does not load it."""
    setup = (
        f"import sys\nimport numpy\n{SHELL}shell.run_line_magic('load_ext', 'durable_nb')\n"
        "assert shell.run_cell(f'%durable run light --store sqlite:///{sys.argv[1]}/runs.db').success\n"
        "assert shell.run_cell('%%durable first\\nx = [1]').success"
    )
    assert loaded(setup, ("numpy.random",), str(tmp_path)) == []


def made_at_attach(prelude: str, tmp_path: Path) -> list[str]:
    """The list ``made`` that ``prelude`` fills, once a shell attached and ran a first cell."""
    return list(printed(attached(prelude, "made"), str(tmp_path)))


def attached(prelude: str, report: str) -> str:
    """Code that runs ``prelude``, attaches a shell, runs a first cell, then prints ``report`` as JSON."""
    return (
        f"import json, sys\n{prelude}\nshell.run_line_magic('load_ext', 'durable_nb')\n"
        "assert shell.run_cell(f'%durable run light --store sqlite:///{sys.argv[1]}/runs.db').success\n"
        f"assert shell.run_cell('%%durable first\\nx = 1').success\nprint(json.dumps({report}))"
    )


# How many string annotations typing compiles (about 0.25M instructions each, on Python 3.11) while
# attaching and running a first cell: a NamedTuple's fields in a module that keeps annotations as
# strings are compiled one by one, so the modules attaching loads evaluate theirs.
ANNOTATIONS_COMPILED_AT_ATTACH = 1


def test_attaching_and_a_first_cell_compile_few_annotations(tmp_path: Path) -> None:
    """At most ANNOTATIONS_COMPILED_AT_ATTACH string annotations are compiled by typing."""
    # typing compiles a string annotation from a class statement: only durable_nb's are counted.
    counter = (
        "made = []\nreal = builtins.compile\n"
        "def counted(source, *args, **kwargs):\n"
        "    frame = caller = sys._getframe(1)\n"
        "    while frame.f_globals.get('__name__') == 'typing':\n"
        "        frame = frame.f_back\n"
        "    if frame is not caller and frame.f_globals.get('__name__', '').startswith('durable_nb'):\n"
        "        made.append(source)\n"
        "    return real(source, *args, **kwargs)\n"
        "builtins.compile = counted"
    )
    made = made_at_attach(f"import builtins\n{SHELL}{counter}", tmp_path)
    assert len(made) <= ANNOTATIONS_COMPILED_AT_ATTACH, made


# How many classes typing's NamedTuple makes while attaching and running a first cell: about 0.6M
# instructions each on Python 3.11, a third of it typing's own; durable_nb's named tuples are
# made by _tuples.Typed (collections.namedtuple's class, without that third).
TYPING_NAMEDTUPLES_AT_ATTACH = 0


def test_attaching_and_a_first_cell_make_no_typing_named_tuples(tmp_path: Path) -> None:
    """At most TYPING_NAMEDTUPLES_AT_ATTACH of durable_nb's classes are made by typing.NamedTuple."""
    counter = (
        "import typing\nmade = []\nreal = typing.NamedTupleMeta.__new__\n"
        "typing.NamedTupleMeta.__new__ = lambda cls, name, bases, ns: (\n"
        "    ns.get('__module__', '').startswith('durable_nb') and made.append(f\"{ns['__module__']}.{name}\")\n"
        ") or real(cls, name, bases, ns)"
    )
    assert len(made := made_at_attach(f"{counter}\n{SHELL}", tmp_path)) <= TYPING_NAMEDTUPLES_AT_ATTACH, made
