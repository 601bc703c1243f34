"""A fingerprint of what an object holds that is the same in every process, pickled or not.

A function or class that cannot be pickled is made again on restore by running its definition.
To tell whether that gives what the cell left, both objects are described the same way and the
descriptions compared: code by its instructions, names and constants (never its file or line,
which differ in a new kernel), functions by their code, defaults, attributes and closure,
classes by their bases and attributes, library objects by name, anything else by what its
``__reduce_ex__`` returns, and what cannot be reduced (a generator, a lock) by its type alone.
Sets and dict keys are sorted, so that hash randomisation between processes does not matter.
"""

from __future__ import annotations

import hashlib
import os
import sys
import types
import warnings
from typing import Any

__all__ = ["shape_of"]

_PLAIN: tuple[type, ...] = (type(None), bool, int, float, complex, str, bytes)
_LONG = 256  # plain values longer than this are described by a digest
_BUDGET = 20_000  # objects described at most; beyond, what is left counts as unknown
_DEPTH = 40
_UNCHANGING = ("__dict__", "__weakref__")


def shape_of(value: Any) -> str:
    """Return a digest of what ``value`` holds, equal for equal objects in any process.

    An object that cannot be described gets a digest of its own, equal to no other.
    """
    try:
        # Looking a library object up by name may touch deprecated attributes: nothing to tell the user.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            description = _Describer().describe(value, 0)
    except Exception:  # noqa: BLE001 - a library object that misbehaves when asked: never taken as unchanged
        return f"undescribed-{os.urandom(16).hex()}"
    return hashlib.sha256(repr(description).encode()).hexdigest()


def _type_name(kind: type) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def _by_name(obj: Any) -> str | None:
    """The importable name of a library object (pickled by name, so the same object anywhere)."""
    module_name = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(module_name, str) or not isinstance(qualname, str) or module_name == "__main__":
        return None
    found: Any = sys.modules.get(module_name)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return f"{module_name}.{qualname}" if found is obj and found is not None else None


def _contents(cell: types.CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # a cell not filled yet
        return _EMPTY


_EMPTY = ("empty cell",)


class _Describer:
    """One description: objects met twice are referred to by the order they were first met in."""

    def __init__(self) -> None:
        self.seen: dict[int, int] = {}
        self.kept: list[Any] = []  # objects made while describing stay alive, so their ids stay theirs

    def describe(self, obj: Any, depth: int) -> Any:
        if isinstance(obj, _PLAIN):
            if isinstance(obj, str | bytes) and len(obj) > _LONG:
                data = obj.encode(errors="surrogatepass") if isinstance(obj, str) else obj
                return (type(obj).__name__, hashlib.sha256(data).hexdigest())
            return (type(obj).__name__, repr(obj))
        if id(obj) in self.seen:
            return ("again", self.seen[id(obj)])
        if depth > _DEPTH or len(self.seen) >= _BUDGET:
            return ("unknown", _type_name(type(obj)))
        self.seen[id(obj)] = len(self.seen)
        self.kept.append(obj)
        return self._describe(obj, depth + 1)

    def _all(self, items: Any, depth: int) -> list[Any]:
        return [self.describe(item, depth) for item in items]

    def _sorted(self, items: Any, depth: int) -> list[Any]:
        return sorted(self._all(items, depth), key=repr)

    def _describe(self, obj: Any, depth: int) -> Any:
        kind = type(obj)
        if kind in (tuple, list):
            return (kind.__name__, self._all(obj, depth))
        if kind in (set, frozenset):
            return (kind.__name__, self._sorted(obj, depth))
        if kind is dict:
            return (
                "dict",
                sorted(([self.describe(k, depth), self.describe(v, depth)] for k, v in obj.items()), key=repr),
            )
        if isinstance(obj, types.ModuleType):
            return ("module", obj.__name__)
        named = _by_name(obj)
        if named is not None:
            return ("named", named)
        if kind is types.CodeType:
            return self._code(obj, depth)
        if kind is types.FunctionType:
            closure = [_contents(cell) for cell in obj.__closure__ or ()]
            parts = (obj.__code__, obj.__defaults__, obj.__kwdefaults__, dict(obj.__dict__), closure)
            return ("function", obj.__qualname__, self._all(parts, depth))
        if isinstance(obj, type):
            attributes = {k: v for k, v in vars(obj).items() if k not in _UNCHANGING}
            return ("class", obj.__qualname__, self._all(obj.__bases__, depth), self.describe(attributes, depth))
        if isinstance(obj, staticmethod | classmethod | types.MethodType):
            return (kind.__name__, self._all([obj.__func__, getattr(obj, "__self__", None)], depth))
        if isinstance(obj, property):
            return ("property", self._all([obj.fget, obj.fset, obj.fdel], depth))
        return self._reduced(obj, depth)

    def _code(self, code: types.CodeType, depth: int) -> Any:
        # Not its file, first line or line table: they differ when the definition runs again.
        fixed = (code.co_name, code.co_code, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars)
        counts = (code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags)
        return ("code", repr(fixed), counts, self._all(code.co_consts, depth))

    def _reduced(self, obj: Any, depth: int) -> Any:
        try:
            reduced = obj.__reduce_ex__(4)
        except Exception:  # noqa: BLE001 - what cannot be reduced (a generator, a lock) is known by its type
            return ("opaque", _type_name(type(obj)))
        if isinstance(reduced, str):
            return ("global", reduced)
        if not isinstance(reduced, tuple) or len(reduced) < 2:
            return ("opaque", _type_name(type(obj)))
        self.kept.append(reduced)
        callable_, arguments, *rest = reduced
        state = rest[0] if rest else None
        items = [list(part) if part is not None else None for part in rest[1:3]]
        return ("object", _type_name(type(obj)), self._all([callable_, arguments, state, *items], depth))
