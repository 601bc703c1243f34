"""Layers that only point down: every import inside the package, lazy ones included, goes to a
layer below its own (the engine and store know no front end; the widgets know no notebook)."""

from __future__ import annotations

import ast
from pathlib import Path

import durable_nb

PACKAGE = Path(durable_nb.__file__).parent

# What each layer may import from the package; anything else is a cycle or an upward arrow.
ALLOWED = {
    "base": set(),
    "store": {"base"},
    "engine": {"base", "store", "driver"},
    "views": {"base", "store", "engine", "driver"},
    "widgets": {"base", "store", "engine", "views", "driver"},
    "notebook": {"base", "store", "engine", "views", "widgets", "jupyter.kernel", "driver"},
    # The command line, a front end (one module a group of commands): it starts the demo, the
    # service and headless notebook runs as their own commands.
    "cli": {"base", "store", "engine", "views", "demo", "service", "headless", "driver"},
    # The service starts notebook runs as run-notebook does (the same run key).
    "service": {"base", "store", "engine", "views", "headless", "driver"},
    # Headless runs drive kernels that load the notebook layer, and read its notes.
    "headless": {"base", "store", "engine", "views", "notebook", "driver"},
    # The demo starts its kernels as headless runs do (on Unix sockets).
    "demo": {"base", "store", "engine", "views", "notebook", "headless", "driver"},
    # A LangGraph checkpointer over the store and the engine's values; LangGraph is imported only here.
    "langgraph": {"base", "store", "engine", "views", "driver"},
    # The Jupyter server extension: the service's approvals page and the notebook's code hashing,
    # over the views and the engine's decisions.
    "jupyter": {"base", "store", "engine", "views", "service", "notebook", "jupyter.kernel", "driver"},
    # What kernels import of it (store keys, the registry file): nothing of Jupyter's server.
    "jupyter.kernel": {"base", "store"},
    "driver": set(),
}


def layer_of(module: str) -> str | None:
    """The layer of a dotted module name inside durable_nb (None for the package's own __init__)."""
    parts = module.split(".")
    if parts[0] != "durable_nb" or len(parts) == 1:
        return None
    head = parts[1]
    base = ("errors", "model", "_ids", "_tally", "_lazy", "_collector", "_formulas", "_frame_room", "_tuples")
    if head in base:
        return "base"
    if head == "_loop":
        return "driver"
    if head == "jupyter" and len(parts) > 2 and parts[2] in ("stores", "registry"):
        return "jupyter.kernel"
    return head


def module_of(path: Path) -> str:
    """The dotted name of a file inside durable_nb (a package's ``__init__.py`` is the package)."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(("durable_nb", *parts))


def is_module(name: str) -> bool:
    """Whether a dotted name inside durable_nb is a module or package of its own."""
    relative = Path(PACKAGE, *name.split(".")[1:])
    return relative.with_suffix(".py").is_file() or (relative / "__init__.py").is_file()


def targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> set[str]:
    """The durable_nb modules one import statement loads (a package's name means its ``__init__.py``)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name.split(".")[0] == "durable_nb"}
    if node.level:
        # Relative to the package holding the file: for an ``__init__.py``, the package itself.
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - node.level + 1]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    if target.split(".")[0] != "durable_nb":
        return set()
    # ``from package import name`` loads the submodule when ``name`` is one, else the package.
    found = {f"{target}.{alias.name}" for alias in node.names if is_module(f"{target}.{alias.name}")}
    if len(found) < len(node.names):
        found.add(target)
    return found


def import_nodes(tree: ast.Module, *, top_level: bool) -> list[ast.Import | ast.ImportFrom]:
    """The import statements of a module: all of them, or those run when it is imported.

    Run at import: the module's body and class bodies, inside ``if``/``try``/``with`` blocks,
    ``if TYPE_CHECKING:`` included (a cycle a type checker follows is one a reader follows too);
    not function bodies, which import lazily.
    """
    if not top_level:
        return [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    found: list[ast.Import | ast.ImportFrom] = []
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            pending.extend(ast.iter_child_nodes(node))
    return found


def imports_of(path: Path, *, top_level: bool = False) -> set[str]:
    """Every durable_nb module a file imports: at the top or inside functions, or at the top only."""
    module = module_of(path)
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in import_nodes(tree, top_level=top_level):
        found |= targets(node, module, path.name == "__init__.py")
    return found


def arrows() -> list[tuple[str, str, str]]:
    """(file, its layer, the layer it imports) for every import between layers."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "__init__.py":
            continue  # the public surface re-exports every layer, lazily for the front ends
        own = layer_of(module_of(path))
        for target in imports_of(path):
            other = layer_of(target)
            if own is not None and other is not None and other != own:
                found.append((str(path.relative_to(PACKAGE)), own, other))
    return found


def test_every_import_points_down() -> None:
    """Layers: no package imports one above it or beside it, so there are no cycles between packages."""
    wrong = [(path, own, other) for path, own, other in arrows() if other not in ALLOWED[own]]
    assert wrong == []


def test_the_store_knows_nothing_above_it() -> None:
    """Layers: the store imports only the error tree and the records, never the engine or a front end."""
    assert {other for _, own, other in arrows() if own == "store"} <= {"base"}
    assert not [path for path, own, other in arrows() if own in ("engine", "store") and other == "views"]


def test_widgets_never_import_the_notebook() -> None:
    """Layers: the widgets depend on a small kernel interface, never on the notebook session."""
    assert not [path for path, own, other in arrows() if own == "widgets" and other == "notebook"]


def test_the_layers_have_no_cycle() -> None:
    """Layers: the allowed arrows themselves form no cycle."""
    visiting: set[str] = set()
    done: set[str] = set()

    def visit(layer: str) -> None:
        assert layer not in visiting, f"cycle through {layer}"
        if layer in done:
            return
        visiting.add(layer)
        for below in ALLOWED[layer]:
            visit(below)
        visiting.discard(layer)
        done.add(layer)

    for layer in ALLOWED:
        visit(layer)


def module_cycles() -> list[list[str]]:
    """Cycles of modules that import each other when imported (``if TYPE_CHECKING:`` included)."""
    graph = {module_of(path): imports_of(path, top_level=True) for path in sorted(PACKAGE.rglob("*.py"))}
    # Tarjan's strongly connected components: every component of more than one module is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def connect(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph.get(module, ())):
            if target not in graph:
                continue
            if target not in index:
                connect(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1 or module in graph[module]:
                cycles.append(sorted(component))

    for module in graph:
        if module not in index:
            connect(module)
    return cycles


def test_no_module_import_cycle() -> None:
    """Layers: no modules import each other at import time, not even only for the type checker."""
    assert module_cycles() == []


def test_the_checker_reads_a_package_init_and_type_checking_imports() -> None:
    """Layers: relative imports of an ``__init__.py`` resolve from its own package, and imports made
    only for the type checker count as run at import time, unlike those inside functions."""

    def first(source: str) -> ast.Import | ast.ImportFrom:
        node = ast.parse(source).body[0]
        assert isinstance(node, (ast.Import, ast.ImportFrom))
        return node

    assert targets(first("from .. import _loop"), "durable_nb.store", is_package=True) == {"durable_nb._loop"}
    assert targets(first("from .protocol import Store"), "durable_nb.store", is_package=True) == {
        "durable_nb.store.protocol"
    }
    assert targets(first("from ...store import connect"), "durable_nb.engine.runs.calls", is_package=False) == {
        "durable_nb.store"
    }
    tree = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .cells import CellRun\n"
        "def later() -> None:\n    from .runner import Runner\n"
    )
    modules = {node.module for node in import_nodes(tree, top_level=True)}
    assert modules == {"typing", "cells"}
