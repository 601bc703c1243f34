"""Objects a library makes once, at import, and holds as a module global: pickled by their name.

``scipy.stats.t`` is one object, made when ``scipy.stats`` is imported: a fitted model's prediction
holds it (``pred.dist is scipy.stats.t``). Pickled by value it came back as a private copy, with a
copy of numpy's global random state frozen inside, so that ``pred.dist.rvs`` no longer drew from
numpy's generator. Pickled as ``module.name``, like a library's classes and functions, it comes
back as the object the library holds in the restoring process.

Only a library's own objects count: an instance of a class of the package whose module holds it,
in a module installed outside the notebook's folder (the standard library, site-packages). A
module the user writes next to the notebook may hold state the notebook changes, and a slot a
library fills at run time (``sys.last_value``) holds the user's objects: those stay pickled by
value. A module's globals are read once, when it is first seen, so a global bound later (a cache,
a user's assignment) is not taken for one; each use checks that the module still holds the object.

Such an object changed in place by the notebook (a monkeypatch) comes back as the restoring
process's library holds it, as a changed library class or function does: a copy would keep the
change for this one value while ``scipy.stats.t`` itself, in the same session, had lost it.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
import types
from collections.abc import Container
from typing import Any

from .cells.pickle_reach import _immutable_types, importable

__all__ = ["candidates", "module_name_of", "refresh"]

# Besides immutable kinds: what is pickled by name already, or never reaches a reducer. Builtin
# containers are no library's own class; a library's subclass of one (a results ``Bunch``, a
# ``dict`` whose ``__dict__`` is itself, which pickling by value cannot rebuild) is indexed.
_SKIPPED = (types.FunctionType, type(Ellipsis), type(NotImplemented))

# id -> (module, attribute, the object): the object is held, so its id is never another's.
_index: dict[int, tuple[str, str, Any]] = {}
_seen: dict[str, types.ModuleType] = {}
_count = -1
_roots: tuple[str, ...] | None = None


def _library_roots() -> tuple[str, ...]:
    """The folders installed code lives in: the standard library and site-packages."""
    paths = {sysconfig.get_path(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    paths.add(site.getusersitepackages())
    roots = {os.path.join(p, "") for p in paths if p} | {os.path.join(os.path.realpath(p), "") for p in paths if p}
    return tuple(sorted(roots))


def _is_library(name: str, module: types.ModuleType) -> bool:
    # Read from the module's dict: a module's __getattr__ (a lazy loader) may import on a miss.
    own = vars(module)
    if name == "__main__" or own.get("__name__") != name or own.get("__spec__") is None:
        return False
    path = own.get("__file__")
    global _roots
    if _roots is None:
        _roots = _library_roots()
    return isinstance(path, str) and path.startswith(_roots)


def _rank(module: str, attribute: str, obj: Any) -> tuple[Any, ...]:
    """Which of several names of one object to pickle: the module of its class first, then public and short ones."""
    own = type(obj).__module__ == module
    private = "._" in f".{module}" or attribute.startswith("_")
    return (not own, private, module.count("."), module, attribute)


def refresh() -> None:
    """Read the globals of the library modules imported since the last call."""
    global _count
    if len(sys.modules) == _count:
        return
    modules = tuple(sys.modules.items())  # one C call: another thread may be importing
    _count = len(modules)
    # Immutable library objects are left too (a dtype): equal ones are interchangeable, and a dtype a
    # module holds is the one every array of that type has, which would all be pickled as that module's.
    skipped = (*_SKIPPED, *_immutable_types())
    # Per type: the library its class is from, or None for a kind never indexed. Most globals are
    # functions, classes and modules: one lookup each, over the thousands of globals of a library.
    libraries: dict[type, str | None] = {}
    for name, module in modules:
        if not isinstance(module, types.ModuleType) or _seen.get(name) is module:
            continue
        _seen[name] = module
        if not _is_library(name, module):
            continue
        top = name.partition(".")[0]
        for attribute, obj in tuple(vars(module).items()):
            kind = type(obj)  # not isinstance: a proxy's __class__ may run code
            if kind in libraries:
                library = libraries[kind]
            else:
                home = kind.__module__
                skip = issubclass(kind, skipped) or not isinstance(home, str)
                library = libraries[kind] = None if skip else home.partition(".")[0]
            if library != top or attribute.startswith("__"):
                continue  # never indexed, or not this library's own object: a value someone put there
            known = _index.get(id(obj))
            if known is None:
                _index[id(obj)] = (name, attribute, obj)
            elif _rank(name, attribute, obj) < _rank(known[0], known[1], obj):  # re-exported: one name, always the same
                _index[id(obj)] = (name, attribute, obj)


def candidates() -> Container[int]:
    """The ids of the objects that may be such objects (a test as cheap as a dict's, for every object pickled)."""
    return _index


def module_name_of(obj: Any) -> tuple[str, str] | None:
    """The module and global name a library holds ``obj`` under, if it is such an object (call ``refresh`` first)."""
    known = _index.get(id(obj))
    if known is None or known[2] is not obj:
        return None
    module, attribute, _ = known
    held = sys.modules.get(module)
    if held is None or vars(held).get(attribute) is not obj or importable(obj):
        return None
    return module, attribute
