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
value. A module's globals are taken once, when it is first seen, so a global bound later (a cache,
a user's assignment) is not taken for one; each use checks that the module still holds the object.
They are read library by library, when an object of a library's class is first pickled.

Such an object changed in place by the notebook (a monkeypatch) comes back as the restoring
process's library holds it, as a changed library class or function does: a copy would keep the
change for this one value while ``scipy.stats.t`` itself, in the same session, had lost it.
"""

from __future__ import annotations

import itertools
import os
import site
import sys
import sysconfig
import types
from collections.abc import Container
from typing import Any

from .cells.pickle_reach import _immutable_types, importable

__all__ = ["index_for", "module_name_of", "refresh"]

# Besides immutable kinds: what is pickled by name already, or never reaches a reducer. Builtin
# containers are no library's own class; a library's subclass of one (a results ``Bunch``, a
# ``dict`` whose ``__dict__`` is itself, which pickling by value cannot rebuild) is indexed.
_SKIPPED = (types.FunctionType, type(Ellipsis), type(NotImplemented))

# Per library (top-level package): id -> (module, attribute, the object). The object is held, so
# its id is never another's.
_indexes: dict[str, dict[int, tuple[str, str, Any]]] = {}
# Per library: the globals of its modules as first seen, not read yet (a copy made in C).
_unread: dict[str, list[tuple[str, dict[str, Any]]]] = {}
_seen: dict[str, types.ModuleType] = {}
_count = -1
_roots: tuple[str, ...] | None = None
_NONE: dict[int, tuple[str, str, Any]] = {}


def _library_roots() -> tuple[str, ...]:
    """The folders installed code lives in: the standard library and site-packages."""
    paths = {sysconfig.get_path(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    paths.add(site.getusersitepackages())
    roots = {os.path.join(p, "") for p in paths if p} | {os.path.join(os.path.realpath(p), "") for p in paths if p}
    return tuple(sorted(roots))


def _is_library(name: str, own: dict[str, Any]) -> bool:
    # Read from the module's dict: a module's __getattr__ (a lazy loader) may import on a miss.
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
    """Take the globals of the modules imported since the last call (read when their library is needed)."""
    global _count
    if len(sys.modules) == _count:
        return
    modules = tuple(sys.modules.items())  # one C call: another thread may be importing
    _count = len(modules)
    for name, module in modules:
        if not isinstance(module, types.ModuleType) or _seen.get(name) is module:
            continue
        _seen[name] = module
        # Copied now, so that a global bound later is not taken for the library's; read in Python only
        # once an object of this library is pickled: a cell of imports, or of one library's values,
        # does not pay for the thousands of globals of every library the kernel holds.
        _unread.setdefault(name.partition(".")[0], []).append((name, vars(module).copy()))


def index_for(kind: type) -> Container[int] | None:
    """The ids of the objects of ``kind``'s library that may be such objects: a test as cheap as a
    dict's, for every object pickled; None when no object of ``kind`` can be one."""
    home = kind.__module__
    if not isinstance(home, str) or home == "builtins" or issubclass(kind, _skipped()):
        return None  # a module, a class, a list: a cell of imports takes no library's globals
    refresh()
    library = home.partition(".")[0]
    unread = _unread.pop(library, None)
    if unread is not None:
        _read(library, unread)
    return _indexes.get(library, _NONE)


def _skipped() -> tuple[type, ...]:
    # Immutable library objects are left too (a dtype): equal ones are interchangeable, and a dtype a
    # module holds is the one every array of that type has, which would all be pickled as that module's.
    return (*_SKIPPED, *_immutable_types())


def _read(library: str, modules: list[tuple[str, dict[str, Any]]]) -> None:
    """Index the globals of one library's modules that are objects of that library's own classes."""
    index = _indexes.setdefault(library, {})
    skipped = _skipped()
    # The types met so far, and those that are this library's own classes. Most globals are
    # functions, classes and modules: a module's globals are sorted by type in C, and only those of
    # the library's own classes (a few in a thousand) are looked at one by one.
    judged: set[type] = set()
    own: set[type] = set()
    for name, found in modules:
        if not _is_library(name, found):
            continue
        kinds = list(map(type, found.values()))  # type(), not isinstance: a proxy's __class__ may run code
        for kind in set(kinds).difference(judged):
            judged.add(kind)
            home = kind.__module__
            if not issubclass(kind, skipped) and isinstance(home, str) and home.partition(".")[0] == library:
                own.add(kind)
        for attribute, obj in itertools.compress(found.items(), map(own.__contains__, kinds)):
            if attribute.startswith("__"):
                continue
            known = index.get(id(obj))
            if known is None:
                index[id(obj)] = (name, attribute, obj)
            elif _rank(name, attribute, obj) < _rank(known[0], known[1], obj):  # re-exported: one name, always the same
                index[id(obj)] = (name, attribute, obj)


def module_name_of(obj: Any) -> tuple[str, str] | None:
    """The module and global name a library holds ``obj`` under, if it is such an object (after ``index_for``)."""
    home = type(obj).__module__
    known = _indexes.get(home.partition(".")[0], _NONE).get(id(obj)) if isinstance(home, str) else None
    if known is None or known[2] is not obj:
        return None
    module, attribute, _ = known
    held = sys.modules.get(module)
    if held is None or vars(held).get(attribute) is not obj or importable(obj):
        return None
    return module, attribute
