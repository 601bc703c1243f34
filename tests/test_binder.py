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
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import json
import re
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
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
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
