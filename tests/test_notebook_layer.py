"""The notebook front end runs code and shows results; the engine encodes and signs what it stores.

No module of the notebook layer (nor the widgets) imports the store's codec or its signing key,
directly or by name from the store package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import durable_nb

PACKAGE = Path(durable_nb.__file__).parent
FORBIDDEN = {"durable_nb.store.codec", "durable_nb.store.secret"}


def _imported(path: Path) -> set[str]:
    """Every module a file imports, a name imported from a package counting as that package's module."""
    return _imports_in(path.read_text(), ".".join(("durable_nb", *path.relative_to(PACKAGE).parent.parts)))


def _imports_in(text: str, package: str) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                target = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def test_the_front_ends_import_neither_the_codec_nor_the_secret() -> None:
    offending = {
        str(path.relative_to(PACKAGE)): sorted(_imported(path) & FORBIDDEN)
        for folder in ("notebook", "widgets")
        for path in sorted((PACKAGE / folder).rglob("*.py"))
        if _imported(path) & FORBIDDEN
    }
    assert offending == {}


def test_the_check_sees_an_import_by_name_from_the_store_package() -> None:
    """``from ..store import codec`` names the codec module even though it imports the package."""
    text = "from ..store import codec\nfrom ..store.secret import load_secret\nimport durable_nb.store.codec\n"
    assert _imports_in(text, "durable_nb.notebook") >= FORBIDDEN
