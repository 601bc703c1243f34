"""What a cell did besides its variables: module attributes it set, set-up calls into
libraries, and the value it showed (kept to bring back ``_`` and ``Out[n]``)."""

from __future__ import annotations

import ast
import inspect
import sys
import types
from typing import Any

from .cellcode import CellCode, SetupCall
from .settings import setting_for_call

__all__ = ["attributes_set", "set_attributes", "shown_value", "unrecorded_calls"]


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


def unrecorded_calls(namespace: dict[str, Any], calls: list[SetupCall]) -> tuple[list[str], set[str]]:
    """Sort a cell's set-up calls into libraries: the calls whose effect no setting reads (to name
    in a warning), and the settings they go into (those read only after their call was made are
    read now; the others are read in full).

    Every call is judged on its own: one library's setting being read says nothing of another
    call into the same library (``matplotlib.use`` changes the backend, which is not restored).
    """
    unrecorded: list[str] = []
    called: set[str] = set()
    for call in calls:
        root, *rest = call.path.split(".")
        if not _into_library(namespace.get(root)):
            continue
        target = namespace[root]
        try:
            for name in rest:
                target = getattr(target, name)
        except Exception:  # noqa: BLE001 - a call that cannot be looked up cannot be said to be read
            target = None
        setting = None if target is None else setting_for_call(target)
        # A setting always read is then read in full (no shortcut from its last reading); one read
        # only after its call, if the call surely ran.
        if setting is not None and not (setting.on_call and call.conditional):
            called.add(setting.name)
        elif setting is None or setting.on_call:
            unrecorded.append(call.text if len(call.text) <= 80 else call.text[:79] + "…")
    return unrecorded, called


def _into_library(value: Any) -> bool:
    """True if a call through ``value`` goes into a library: through a module, a library's class or
    function, or an object a library module holds (``from matplotlib import colormaps``). A method
    of a notebook variable changes that variable, which is stored as such."""
    if value is None:
        return False
    if isinstance(value, types.ModuleType):
        return value.__name__ != "__main__"
    if isinstance(value, type) or inspect.isroutine(value):
        return (getattr(value, "__module__", None) or "__main__") != "__main__"
    return _held_by_library(value)


def _held_by_library(value: Any) -> bool:
    name = type(value).__module__ or ""
    for module_name in {name, name.split(".")[0]} - {"__main__", "builtins"}:
        module = sys.modules.get(module_name)
        if module is not None and any(held is value for held in list(vars(module).values())):
            return True
    return False


def shown_value(cell: CellCode, value: Any) -> tuple[str | None, Any]:
    """Return how to bring the cell's value back: its variable's name, or the value to keep a copy of."""
    if value is None or cell.last_expr is None:
        return None, None
    if isinstance(cell.last_expr.body, ast.Name):
        return cell.last_expr.body.id, None
    if type(value).__module__.startswith("matplotlib"):
        return None, None  # an artist: its figure is replayed as an image; a stand-in shows its text
    return None, value
