"""What a cell did besides its variables: module attributes it set, set-up calls into
libraries, and the value it showed (kept to bring back ``_`` and ``Out[n]``)."""

from __future__ import annotations

import ast
import types
from typing import Any

from ..errors import SerializationError
from ..model import Blob
from ..store import codec
from .cellcode import CellCode

__all__ = ["attributes_set", "result_blob", "set_attributes", "uncovered_calls"]

# A cell's value is stored with it (for ``_`` and ``Out[n]`` after a restore) up to this size.
_RESULT_BYTES = 1 << 20
# Top-level packages whose settings the settings watch reads: a set-up call into them is covered.
_WATCHED_PACKAGES = frozenset(
    "numpy sklearn pandas matplotlib seaborn random warnings logging os sys torch dotenv".split()
)


def attributes_set(namespace: dict[str, Any], paths: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Return the values the cell assigned to modules' attributes (``openai.api_key = …``)."""
    found: dict[str, Any] = {}
    effects: list[str] = []
    for path in paths:
        root, *rest = path.split(".")
        if not isinstance(namespace.get(root), types.ModuleType):
            continue
        target = namespace[root]
        try:
            for name in rest:
                target = getattr(target, name)
        except AttributeError:
            effects.append(path)
            continue
        found[path] = target
    return found, effects


def set_attributes(namespace: dict[str, Any], attributes: dict[str, Any]) -> list[str]:
    """Assign restored module attributes again; return what could not be set, for the person."""
    problems = []
    for path, value in attributes.items():
        root, *rest = path.split(".")
        try:
            target = namespace[root]
            for name in rest[:-1]:
                target = getattr(target, name)
            setattr(target, rest[-1], value)
        except Exception as error:  # noqa: BLE001 - reported to the user, the restore goes on
            problems.append(f"{path} = …: {type(error).__name__}: {error}")
    return problems


def uncovered_calls(namespace: dict[str, Any], calls: list[tuple[str, str]], settings_changed: bool) -> list[str]:
    """Return set-up calls into libraries whose settings durable_nb does not read."""
    if settings_changed:
        return []
    found = []
    for path, text in calls:
        package = _package_of(namespace.get(path.split(".")[0]))
        if package and package not in _WATCHED_PACKAGES and package != "__main__":
            found.append(text if len(text) <= 80 else text[:79] + "…")
    return found


def _package_of(value: Any) -> str:
    name = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
    return str(name or "").split(".")[0]


def result_blob(cell: CellCode, value: Any, secret: bytes) -> Blob | str | None:
    """Return how to bring the cell's value back: its variable's name, or a small stored copy."""
    if value is None or cell.last_expr is None:
        return None
    if isinstance(cell.last_expr.body, ast.Name):
        return cell.last_expr.body.id
    if type(value).__module__.startswith("matplotlib"):
        return None  # an artist: its figure is replayed as an image; a stand-in shows its text
    try:
        blob = codec.encode(value, secret, "the cell's value")
    except SerializationError:
        return None
    return blob if blob.size <= _RESULT_BYTES else None
