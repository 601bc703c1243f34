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
    "notebook": {"base", "store", "engine", "views", "widgets", "driver"},
    "cli": {"base", "store", "engine", "views", "demo", "service", "headless", "driver"},
    # The service starts notebook runs as run-notebook does (the same run key).
    "service": {"base", "store", "engine", "views", "headless", "driver"},
    # Headless runs drive kernels that load the notebook layer, and read its notes.
    "headless": {"base", "store", "engine", "views", "notebook", "driver"},
    # The demo starts its kernels as headless runs do (on Unix sockets).
    "demo": {"base", "store", "engine", "views", "notebook", "headless", "driver"},
    # A LangGraph checkpointer over the store and the engine's values; LangGraph is imported only here.
    "langgraph": {"base", "store", "engine", "views", "driver"},
    "driver": set(),
}


def layer_of(module: str) -> str | None:
    """The layer of a dotted module name inside durable_nb (None for the package's own __init__)."""
    parts = module.split(".")
    if parts[0] != "durable_nb" or len(parts) == 1:
        return None
    head = parts[1]
    if head in ("errors", "model", "_ids"):
        return "base"
    if head == "_loop":
        return "driver"
    if head == "cli":
        return "cli"
    return head


def imports_of(path: Path) -> set[str]:
    """Every durable_nb module a file imports, at the top or inside functions."""
    module = ".".join(("durable_nb", *path.relative_to(PACKAGE).with_suffix("").parts))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("durable_nb"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("durable_nb"):
                found.add(target)
                found.update(f"{target}.{alias.name}" for alias in node.names if target in ("durable_nb",))
    return found


def arrows() -> list[tuple[str, str, str]]:
    """(file, its layer, the layer it imports) for every import between layers."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "__init__.py":
            continue  # the public surface re-exports every layer, lazily for the front ends
        module = ".".join(("durable_nb", *path.relative_to(PACKAGE).with_suffix("").parts))
        own = layer_of(module)
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
