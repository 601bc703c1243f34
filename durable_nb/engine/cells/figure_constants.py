"""matplotlib's own objects that every figure's pickle carries, which tie no two figures together.

Every figure reaches a few objects matplotlib holds once for the whole process: lists read from
``rcParams`` (``path.effects``, ``axes.formatter.limits``), paths held by a module or a class
(``markers._empty_path``, ``MarkerStyle._tickhoriz_path``, ``Path._unit_circle``, with their
state dict and arrays, whose codes transformed markers share) and ``IdentityTransform._mtx``.
Counted as shared, they made every figure of a notebook one unit, pickled whole whenever one
changed. They are found anew at each pickle, from where matplotlib holds them now: an object no
longer held there (or a figure's own) still ties what reaches it. No restore gave back
matplotlib's own object anyway: a restored figure holds its own copy.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Iterable
from typing import Any

__all__ = ["figure_constants"]

_CONTAINERS = frozenset({list, dict, set})


def figure_constants(kinds: Iterable[type]) -> set[int]:
    """The ids of matplotlib's process-wide objects reachable from instances of ``kinds``.

    Held by the classes of ``kinds`` that are matplotlib's, by matplotlib's modules, or as values of
    ``rcParams``; a path among them adds its state dict and the arrays in it, a list its lists
    (a colormap's colours), a class's weak cache its paths.
    """
    matplotlib = sys.modules.get("matplotlib")
    path_module = sys.modules.get("matplotlib.path")
    numpy = sys.modules.get("numpy")
    if matplotlib is None or path_module is None or numpy is None:
        return set()
    held = {*_CONTAINERS, numpy.ndarray, path_module.Path}
    roots: list[Any] = [v for v in dict.values(matplotlib.rcParams) if type(v) in _CONTAINERS]
    owners: list[Any] = [m for n, m in list(sys.modules.items()) if n.partition(".")[0] == "matplotlib"]
    owners += {base for kind in kinds for base in kind.__mro__ if base.__module__.partition(".")[0] == "matplotlib"}
    caches = []
    for owner in owners:
        values = tuple(vars(owner).values())  # a module another thread imports into may grow meanwhile
        roots += [value for value in values if type(value) in held]
        caches += [value for value in values if type(value) is weakref.WeakValueDictionary]
    for cache in caches:
        roots += [path for path in cache.values() if type(path) is path_module.Path]
    found = {id(root) for root in roots}
    for root in roots:
        if type(root) is path_module.Path:
            state = vars(root)
            found.add(id(state))
            found.update(id(value) for value in state.values() if type(value) is numpy.ndarray)
        elif type(root) is list:
            found.update(id(item) for item in root if type(item) is list)
    return found
