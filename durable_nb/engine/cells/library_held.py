"""Objects pandas and matplotlib hold once for the whole process, which tie no two values together.

Pickles of unrelated values reach some objects a library holds for all of them: pandas pickles
every frame's ``_metadata``, the one list ``DataFrame._metadata``; every matplotlib figure
reaches lists read from ``rcParams`` (``path.effects``, ``axes.formatter.limits``), paths held
by a module or a class (``markers._empty_path``, ``MarkerStyle._tickhoriz_path``,
``Path._unit_circle``, with their state dict and arrays, whose codes transformed markers share),
``IdentityTransform._mtx`` and a colormap's colours. Counted as shared, they made every frame,
or every figure, of a notebook one unit, pickled whole whenever one changed. Those a module
holds as a global (``markers._empty_path``) are pickled by name and come back as the library's
own (``module_singletons``); the rest come back as the restored value's own copy.

Where each library holds such objects (its classes; matplotlib's modules and ``rcParams`` too)
is read once and kept, with the path from the holder to each object. The path is checked again
at each use: an object the library no longer holds there (replaced, or a value's own) still
ties what reaches it. A holder is read again when it holds more or fewer entries, or another
object where it held one that counts or None (a class attribute set on first use); matplotlib's
modules are looked for again when a module was imported. Only these libraries: a shared container
elsewhere may be a registry that its instances fill together.
"""

from __future__ import annotations

import itertools
import sys
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .pickle_reach import importable

__all__ = ["without_library_held"]

# The libraries whose own objects tie nothing, and whether their modules' objects count (not
# only their classes').
_LIBRARIES = {"pandas": False, "matplotlib": True}
# Mappings a library's top module holds whose values count too.
_MAPPINGS = {"matplotlib": ("rcParams",)}
_CONTAINERS = (list, dict, set)

# One step from a holder to an object: (read, container, key, value), held while
# ``read(container, key) is value``.
_Link = tuple[Callable[[Any, Any], Any], Any, Any, Any]


def without_library_held(found: list[int], memo: Mapping[int, tuple[int, Any]], kinds: Iterable[type]) -> list[int]:
    """The ids of ``found`` (a pickle's reach, its objects in ``memo``) left once those the libraries
    of ``kinds`` (the types of the objects pickled) still hold for the whole process are taken out."""
    holders = _holders(kinds)
    if not holders:
        return found
    links: dict[int, tuple[_Link, ...]] = {}
    for holder in holders:
        if holder.links:
            links.update(holder.links)
    held = {key for key in filter(links.__contains__, found) if _still_held(links[key], memo[key][1])}
    return [key for key in found if key not in held] if held else found


def _still_held(path: tuple[_Link, ...], obj: Any) -> bool:
    if path[-1][3] is not obj:
        return False
    try:
        for read, container, key, value in path:
            if read(container, key) is not value:
                return False
    except IndexError:  # a list that holds fewer items now
        return False
    return True


class _Holder:
    """What one class, module, mapping or weak cache held when last read, and the path to each object that counts."""

    __slots__ = ("caches", "ids", "items", "keys", "links", "mapping", "read", "size", "values")

    def __init__(self, mapping: Any) -> None:
        self.mapping = mapping
        # A dict read as a dict: RcParams' own lookup resolves some entries (the backend) when read.
        kind = dict if isinstance(mapping, dict) else type(mapping)
        self.read: Callable[[Any, Any], Any] = kind.get
        self.items: Callable[[Any], Iterable[tuple[Any, Any]]] = kind.items
        self.values: tuple[Any, ...] = ()  # held: no id of them is reused while they are compared
        self.size = -1
        self.keys: tuple[Any, ...] = ()
        self.ids: tuple[int, ...] = ()
        self.links: dict[int, tuple[_Link, ...]] = {}
        self.caches: list[_Holder] = []

    def refresh(self) -> None:
        """Read the holder again if it holds more or fewer entries, or another object where it held one
        that counts or None (a class attribute set on first use, as ``Path._unit_circle``)."""
        # Read in C: a class has hundreds of attributes, its methods mostly, compared at each pickle.
        now = map(self.read, itertools.repeat(self.mapping), self.keys)
        if len(self.mapping) == self.size and tuple(map(id, now)) == self.ids:
            return
        # One C call, with no switch to another thread (a module another thread imports into may grow).
        items = tuple(self.items(self.mapping))
        self.values, self.size = items, len(items)
        self.links, self.caches = {}, []
        counted = _counted()
        watched = []
        for key, value in items:
            if type(value) in counted:
                _add(self.links, ((self.read, self.mapping, key, value),), value)
            elif type(value) is weakref.WeakValueDictionary:
                self.caches.append(_Holder(value))
            elif value is not None:
                continue
            watched.append((key, value))
        self.keys = tuple(key for key, _ in watched)
        self.ids = tuple(id(value) for _, value in watched)


def _counted() -> frozenset[type]:
    # What a library holds that its values' pickles carry: containers, arrays and matplotlib's paths.
    kinds: list[Any] = [*_CONTAINERS]
    numpy = sys.modules.get("numpy")
    path = sys.modules.get("matplotlib.path")
    kinds += [numpy.ndarray] if numpy is not None else []
    kinds += [path.Path] if path is not None else []
    return frozenset(kinds)


def _add(links: dict[int, tuple[_Link, ...]], path: tuple[_Link, ...], value: Any) -> None:
    """Note ``value`` at the end of ``path``, then what it holds that its pickle carries: a path's state
    dict and the arrays in it, a list's lists (a colormap's colours)."""
    links.setdefault(id(value), path)
    if type(value) is list:
        for index, item in enumerate(value):
            if type(item) is list:
                links.setdefault(id(item), (*path, (list.__getitem__, value, index, item)))
        return
    module = sys.modules.get("matplotlib.path")
    if module is None or type(value) is not module.Path:
        return
    state = vars(value)
    within = (*path, (getattr, value, "__dict__", state))
    links.setdefault(id(state), within)
    numpy = sys.modules.get("numpy")
    for name, item in tuple(state.items()):
        if numpy is not None and type(item) is numpy.ndarray:
            links.setdefault(id(item), (*within, (dict.get, state, name, item)))


def _holders(kinds: Iterable[type]) -> list[_Holder]:
    """The holders of the libraries ``kinds`` come from, each current: their classes, and the libraries'
    modules and mappings, with the weak caches they hold."""
    classes: set[type] = set()
    for kind in kinds:
        bases = _BASES.get(kind)
        if bases is None:
            bases = _BASES[kind] = tuple(b for b in kind.__mro__ if _library_of(b) and importable(b))
        classes.update(bases)
    if not classes:
        return []
    found: list[_Holder] = []
    for base in classes:
        holder = _CLASSES.get(base)
        if holder is None:
            holder = _CLASSES[base] = _Holder(vars(base))
        found.append(holder)
    for library in {_library_of(base) for base in classes}:
        if _LIBRARIES[library]:
            found += _module_holders(library)
    for holder in found:  # the list grows by the caches found on the way, each refreshed in turn
        holder.refresh()
        found += holder.caches
    return found


def _library_of(kind: type) -> str:
    top = kind.__module__.partition(".")[0]
    return top if top in _LIBRARIES else ""


def _module_holders(library: str) -> list[_Holder]:
    """The holders of a library's loaded modules and of its mappings, found again when a module was imported."""
    count, holders = _MODULES.get(library, (-1, []))
    if count == len(sys.modules):
        return holders
    known = {id(h.mapping): h for h in holders}
    modules = [m for n, m in list(sys.modules.items()) if n.partition(".")[0] == library]
    mappings = [vars(m) for m in modules]
    top = sys.modules.get(library)
    held = [getattr(top, name, None) for name in _MAPPINGS.get(library, ())]
    mappings += [mapping for mapping in held if isinstance(mapping, dict)]
    holders = [known.get(id(m)) or _Holder(m) for m in mappings]
    _MODULES[library] = (len(sys.modules), holders)
    return holders


# The library classes in each type's MRO; a holder each, read again when its attributes are no longer
# the same objects (the classes, found by name, live as long as their modules).
_BASES: weakref.WeakKeyDictionary[type, tuple[type, ...]] = weakref.WeakKeyDictionary()
_CLASSES: dict[type, _Holder] = {}
_MODULES: dict[str, tuple[int, list[_Holder]]] = {}
