"""Binder: what ``binder/`` installs runs every notebook in ``notebooks/``.

Binder builds from ``binder/`` alone once the folder exists (the root pyproject is read only
through a ``.`` line of ``binder/requirements.txt``) and picks Python 3.10 unless
``binder/runtime.txt`` says otherwise. ``notebooks/agent.ipynb`` once failed there with ``No
module named 'openai'``: the requirements installed durable_nb without its ``agents`` extra.

The test reads what Binder would install (each requirement line; ``.`` and ``.[extra,…]`` are
this project's dependencies and extras from pyproject.toml), follows every requirement's own
dependencies through the installed distributions' metadata, and checks that each module every
notebook imports (magics turned into Python by IPython first) is in the standard library, in
durable_nb, or in one of those distributions.

JupyterLab on Binder shows the Durable panel only if pip built the front end while installing
durable_nb (repo2docker's environment has Node): ``binder/postBuild`` fails the build unless Jupyter
lists both halves enabled. Its tests give it a ``jupyter`` whose lists lack one half (the failure
injected); ``.ci/binder`` builds the whole environment as repo2docker would and opens the notebooks.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path

import pytest
from IPython.core.inputtransformer2 import TransformerManager
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
BINDER = ROOT / "binder"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
# `.` or `.[agents,postgres]`, optionally editable: this repository with those extras.
THIS_PROJECT = re.compile(r"^(?:-e\s+)?\.(?:\[(?P<extras>[^\]]*)\])?$")


def binder_requirements(lines: Iterable[str]) -> list[Requirement]:
    """Return what the requirements lines install, this project's lines expanded to its dependencies."""
    found: list[Requirement] = []
    for raw in lines:
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        here = THIS_PROJECT.match(line)
        if here is None:
            found.append(Requirement(line))
            continue
        extras = [e.strip() for e in (here["extras"] or "").split(",") if e.strip()]
        unknown = [e for e in extras if e not in PROJECT["optional-dependencies"]]
        assert not unknown, f"binder/requirements.txt names extras pyproject.toml does not have: {unknown}"
        found += [Requirement(r) for r in PROJECT["dependencies"]]
        found += [Requirement(r) for e in extras for r in PROJECT["optional-dependencies"][e]]
    return found


def installed_closure(requirements: list[Requirement]) -> set[str]:
    """Return the canonical names of the distributions the requirements bring, with their dependencies."""
    seen: set[str] = set()
    pending = [(r, frozenset(r.extras)) for r in requirements]
    while pending:
        requirement, extras = pending.pop()
        name = canonicalize_name(requirement.name)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        if name in seen:
            continue
        seen.add(name)
        try:
            needs = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue  # not installed here: its own dependencies are unknown, its name still counts
        for text in needs:
            need = Requirement(text)
            wanted = need.marker is None or any(need.marker.evaluate({"extra": e}) for e in ("", *extras))
            if wanted:
                pending.append((need, frozenset(need.extras)))
    return seen


def notebook_imports(path: Path) -> set[str]:
    """Return the top-level modules a notebook's code cells import (after IPython's transformations)."""
    transform = TransformerManager().transform_cell
    modules: set[str] = set()
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        tree = ast.parse(transform("".join(cell["source"])))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
            elif isinstance(node, ast.Call) and _loads_extension(node):
                modules.add(str(node.args[1].value).split(".")[0])  # type: ignore[attr-defined]
    return modules


def _loads_extension(node: ast.Call) -> bool:
    # %load_ext NAME becomes get_ipython().run_line_magic('load_ext', 'NAME'): an import too.
    function = node.func
    return (
        isinstance(function, ast.Attribute)
        and function.attr == "run_line_magic"
        and len(node.args) == 2
        and all(isinstance(a, ast.Constant) for a in node.args)
        and node.args[0].value == "load_ext"  # type: ignore[attr-defined]
    )


@functools.cache
def _providers() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def distributions_of(module: str) -> set[str]:
    """Return the canonical names of the installed distributions that provide a top-level module."""
    return {canonicalize_name(name) for name in _providers().get(module, [module])}


def unsatisfied(modules: set[str], closure: set[str]) -> list[str]:
    """Return the modules neither the standard library, durable_nb nor the closure provides."""
    return sorted(
        m
        for m in modules
        if m not in sys.stdlib_module_names and m != "durable_nb" and not distributions_of(m) & closure
    )


def test_binder_runs_python_the_project_supports() -> None:
    """binder/runtime.txt names a Python that pyproject's requires-python accepts (Binder's default,
    3.10, does not)."""
    runtime = (BINDER / "runtime.txt").read_text().strip()
    match = re.fullmatch(r"python-(\d+\.\d+)", runtime)
    assert match, f"binder/runtime.txt should read python-X.Y, not {runtime!r}"
    assert SpecifierSet(PROJECT["requires-python"]).contains(match[1] + ".0"), (runtime, PROJECT["requires-python"])


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_binder_installs_what_every_notebook_imports(notebook: Path) -> None:
    """Each module the notebook imports comes with what binder/requirements.txt installs."""
    closure = installed_closure(binder_requirements((BINDER / "requirements.txt").read_text().splitlines()))
    imports = notebook_imports(notebook)
    assert "durable_nb" in imports
    missing = unsatisfied(imports, closure)
    assert not missing, f"{notebook.name} imports {missing}, which binder/requirements.txt does not install"


def test_the_check_finds_a_notebook_import_binder_lacks() -> None:
    """The check itself: with the core package alone (binder's old requirements), openai is missing."""
    closure = installed_closure(binder_requirements([".", "jupyterlab>=4.2"]))
    assert unsatisfied({"openai", "pandas", "json", "durable_nb"}, closure) == ["openai"]
    assert unsatisfied({"openai"}, installed_closure(binder_requirements([".[agents]"]))) == []


def _requirement_lines() -> list[str]:
    lines = (BINDER / "requirements.txt").read_text().splitlines()
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]


def test_binder_installs_durable_nb_with_its_front_end() -> None:
    """durable_nb is installed as a wheel is built (front end with npm), never editable: an editable
    install without Node skips the front end and still succeeds."""
    ours = [line for line in _requirement_lines() if THIS_PROJECT.match(line)]
    assert ours and not any(line.startswith("-e") for line in ours), ours


def test_binder_runs_the_jupyterlab_the_front_end_is_built_for() -> None:
    """binder/requirements.txt asks for JupyterLab in the range pyproject's build-system builds the front
    end with (a JupyterLab 5 would not load a JupyterLab 4 extension)."""
    build = {Requirement(r).name: Requirement(r).specifier for r in PYPROJECT["build-system"]["requires"]}
    lab = [Requirement(line) for line in _requirement_lines() if not THIS_PROJECT.match(line)]
    binder = {canonicalize_name(r.name): r.specifier for r in lab}
    assert binder.get("jupyterlab") == build["jupyterlab"], (binder.get("jupyterlab"), build["jupyterlab"])


# What `jupyter server extension list` and `jupyter labextension list` print (colours included) when
# durable_nb is installed; the failures below take a part away.
SERVER_LIST = """Config dir: {env}/etc/jupyter
    durable_nb.jupyter \x1b[32menabled\x1b[0m
    - Validating durable_nb.jupyter...
      durable_nb.jupyter  \x1b[32mOK\x1b[0m
    jupyterlab \x1b[32menabled\x1b[0m
"""
LAB_LIST = """JupyterLab v4.6.6
{env}/share/jupyter/labextensions
        durable-nb v0.1.0 \x1b[32menabled\x1b[0m \x1b[32mOK\x1b[0m (python, durable-nb)
        jupyterlab_pygments v0.3.0 \x1b[32menabled\x1b[0m \x1b[32mOK\x1b[0m (python, jupyterlab_pygments)
"""


def run_post_build(tmp_path: Path, server_list: str, lab_list: str) -> subprocess.CompletedProcess[str]:
    """Run binder/postBuild with a home of its own and a ``jupyter`` on PATH that prints these lists."""
    tools = tmp_path / "bin"
    tools.mkdir()
    (tmp_path / "server.txt").write_text(server_list)
    (tmp_path / "lab.txt").write_text(lab_list)
    jupyter = tools / "jupyter"
    jupyter.write_text(
        "#!/bin/sh\n"
        f'case "$1" in server) cat "{tmp_path}/server.txt";; labextension) cat "{tmp_path}/lab.txt";;'
        " *) exit 2;; esac\n"
    )
    jupyter.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "PATH": f"{tools}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(
        ["bash", str(BINDER / "postBuild")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_post_build_loads_durable_nb_in_every_kernel_when_jupyter_lists_both_halves(tmp_path: Path) -> None:
    """With both halves enabled, postBuild succeeds and the kernels' IPython config loads durable_nb."""
    done = run_post_build(tmp_path, SERVER_LIST, LAB_LIST)
    assert done.returncode == 0, done.stderr
    config = (tmp_path / "home" / ".ipython" / "profile_default" / "ipython_kernel_config.py").read_text()
    assert 'c.InteractiveShellApp.extensions = ["durable_nb"]' in config
    assert "durable_nb.jupyter and durable-nb enabled" in done.stdout


@pytest.mark.parametrize(
    ("server_list", "lab_list", "named"),
    [
        (SERVER_LIST, LAB_LIST.replace("        durable-nb v0.1.0", "        other v0.1.0"), "durable-nb"),
        (
            SERVER_LIST,
            LAB_LIST.replace("32menabled\x1b[0m \x1b[32mOK", "31mdisabled\x1b[0m \x1b[32mOK", 1),
            "durable-nb",
        ),
        (SERVER_LIST.replace("32menabled", "31mdisabled", 1), LAB_LIST, "durable_nb.jupyter"),
        ("Config dir: /etc/jupyter\n", LAB_LIST, "durable_nb.jupyter"),
    ],
    ids=["front-end-missing", "front-end-disabled", "server-extension-disabled", "server-extension-missing"],
)
def test_post_build_fails_the_build_when_a_half_is_missing(
    tmp_path: Path, server_list: str, lab_list: str, named: str
) -> None:
    """postBuild fails (so the Binder build does) naming the half Jupyter does not list enabled, and shows
    what Jupyter listed."""
    done = run_post_build(tmp_path, server_list, lab_list)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("binder/postBuild:") and named in last, done.stderr
    assert "Config dir" in done.stderr or "JupyterLab v" in done.stderr
