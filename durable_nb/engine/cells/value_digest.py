"""One walk over a unit's values that digests what pickling would write of them, without pickling.

The walk (``Digest``) takes figures and their artists by what matplotlib reports of them, a
scikit-learn estimator by its state, and a pandas or statsmodels object as the pickler takes it
apart (through its own ``__reduce_ex__``), array bytes hashed with xxhash. Whatever it cannot
vouch for raises ``Refused``: the caller then pickles the value, never calls it unchanged.
"""

from __future__ import annotations

import operator
import sys
import types
import weakref
from typing import Any

import xxhash

__all__ = ["SCALARS", "Digest", "Refused", "plain_array"]

# Depth and size limits of an estimator walk: beyond them the walk refuses (the value is pickled).
_MAX_DEPTH = 40
_MAX_ITEMS = 200_000
SCALARS = frozenset({type(None), bool, int, float, complex, str, bytes})
# Libraries whose objects are digested through their own ``__reduce_ex__``, as pickling takes them apart.
_REDUCED = frozenset({"pandas", "statsmodels", "patsy"})
# The standard library's own types such objects hold, taken apart the same way.
_REDUCED_TYPES = frozenset({types.SimpleNamespace})
_CONTAINERS = (tuple, list, dict)
_FUNCTIONS = (types.FunctionType, types.BuiltinFunctionType)


class Refused(Exception):
    """Raised inside a walk that cannot vouch for what it met."""


def _artists(figure: Any) -> tuple[tuple[Any, ...], bool]:
    """The artists whose animated flag a figure's witness reads, and whether each class reads it by
    matplotlib's own ``get_animated``.

    Two levels only (the figure, its axes and what they hold): deeper down, an axis makes its
    ticks when asked for them, and reading must not change what the pickle holds.
    """
    artists = [figure, *figure.get_children()]
    for ax in figure.axes:
        artists += ax.get_children()
    kinds = set(map(type, artists))
    return tuple(artists), kinds <= _FLAGGED or _flagged(kinds)


def _animated(artists: tuple[Any, ...], flagged: bool) -> bool:
    # Animated artists do not report their changes (matplotlib leaves them to the blitting code).
    if not flagged:
        return any(artist.get_animated() for artist in artists if hasattr(artist, "get_animated"))
    # Artist.get_animated reads the flag: read in C, without a call per artist (a figure has hundreds).
    return any(map(_ANIMATED, artists))


def _flagged(kinds: set[type]) -> bool:
    """True if every one of ``kinds`` tells whether it is animated by matplotlib's own flag (noted once)."""
    artist = sys.modules.get("matplotlib.artist")
    own = getattr(getattr(artist, "Artist", None), "get_animated", None)
    _FLAGGED.update(kind for kind in kinds if own is not None and getattr(kind, "get_animated", None) is own)
    return kinds <= _FLAGGED


_ANIMATED = operator.attrgetter("_animated")
# Artist classes whose get_animated is matplotlib's own, kept for the process (a notebook's own artist
# class too: a few classes at most).
_FLAGGED: set[type] = set()


class Digest:
    """One walk over figures, axes and estimators, digesting what is not watched."""

    def __init__(self, artists: dict[int, tuple[tuple[Any, ...], bool]] | None = None) -> None:
        self.hasher = xxhash.xxh3_128()  # array bytes, as they come
        # Each figure's artists (``_artists``), by the figure's id: read here, or given by a witness
        # that found the figure reported no change since it read them.
        self.artists: dict[int, tuple[tuple[Any, ...], bool]] = {} if artists is None else artists
        self.parts: list[Any] = []  # everything else, in order
        self.seen: dict[int, int] = {}
        self.keep: list[Any] = []  # what the walk met stays alive while it runs (no id reuse)
        self.figures: dict[int, Any] = {}
        self.items = 0
        self.made = 0  # > 0 inside objects the walk itself made (a tree's state)
        numpy = sys.modules.get("numpy")
        self.ndarray: Any = numpy.ndarray if numpy is not None else None
        self.generic: Any = numpy.generic if numpy is not None else None
        self.figure_type: Any = getattr(sys.modules.get("matplotlib.figure"), "FigureBase", None)
        self.axes_type: Any = getattr(sys.modules.get("matplotlib.axes"), "Axes", None)
        self.artist_type: Any = getattr(sys.modules.get("matplotlib.artist"), "Artist", None)
        self.container_type: Any = getattr(sys.modules.get("matplotlib.container"), "Container", None)
        base = sys.modules.get("sklearn.base")
        self.estimator: Any = getattr(base, "BaseEstimator", None)
        tree = sys.modules.get("sklearn.tree._tree")
        self.tree: Any = getattr(tree, "Tree", None)
        self.dtype: Any = numpy.dtype if numpy is not None else None
        pickler = sys.modules.get("cloudpickle.cloudpickle")
        # The types cloudpickle reduces its own way, and its test of what it pickles by name.
        self.dispatch: Any = getattr(getattr(pickler, "Pickler", None), "dispatch_table", None)
        self.by_name: Any = getattr(pickler, "_should_pickle_by_reference", None)

    def add(self, *parts: Any) -> None:
        # Written out once, at the end (one repr in C): hashing part by part cost more than pickling.
        self.parts.extend(parts)

    def hexdigest(self) -> str:
        """The digest of everything the walk met."""
        hasher = self.hasher.copy()
        hasher.update(repr(self.parts).encode())
        return hasher.hexdigest()

    def walk(self, value: Any, depth: int = 0) -> None:
        """Digest ``value``; raise Refused for anything a digest cannot vouch for."""
        self.items += 1
        if depth > _MAX_DEPTH or self.items > _MAX_ITEMS:
            raise Refused
        kind = type(value)
        if kind in SCALARS:
            self.parts.append(value)  # its repr tells its type too: 1, 1.0, True, '1', b'1'
            return
        if self._immutable(value, kind, depth):
            return
        key = id(value)
        if key in self.seen:  # the same object again: its position, as a pickle's memo would
            self.add("again", self.seen[key])
            return
        self.seen[key] = len(self.seen)
        self.keep.append(value)
        if not self.made:
            # Which object, not only what it holds: a pickle's reach (sharing between variables) is by identity.
            self.parts.append(key)
        if self.generic is not None and isinstance(value, self.generic):
            self.add(kind.__name__, value.dtype.str, value.tobytes())
        elif self.ndarray is not None and kind is self.ndarray:
            self._array(value, depth)
        elif kind is list or kind is tuple:
            self.add(kind.__name__, len(value))
            for item in value:
                if type(item) in SCALARS:
                    self.parts.append(item)
                else:
                    self.walk(item, depth + 1)
        elif kind is dict:
            self.add("dict", len(value))
            for name, item in value.items():
                self.parts.append(name) if type(name) in SCALARS else self.walk(name, depth + 1)
                self.parts.append(item) if type(item) in SCALARS else self.walk(item, depth + 1)
        elif self.figure_type is not None and isinstance(value, self.figure_type):
            self._figure(value)
        elif self.axes_type is not None and isinstance(value, self.axes_type):
            self._figure(value.get_figure(root=True) if _has_root(value) else value.figure)
            self.add("axes", id(value))
        elif self.artist_type is not None and isinstance(value, self.artist_type):
            self._artist(value)
        elif self.container_type is not None and isinstance(value, self.container_type):
            # What ax.bar and ax.hist return: a tuple of artists, with attributes.
            self.add("container", kind.__qualname__, len(value))
            for item in value:
                self.walk(item, depth + 1)
            self._attributes(value)
        elif self.estimator is not None and isinstance(value, self.estimator):
            self._estimator(value, depth)
        elif self.tree is not None and kind is self.tree:
            self.add("tree", value.n_features, value.n_outputs)
            # Its state is made anew at each call: what it holds counts, not which objects.
            self.made += 1
            try:
                self.walk(value.n_classes, depth + 1)
                self.walk(value.__getstate__(), depth + 1)
            finally:
                self.made -= 1
        elif kind is set or kind is frozenset:
            self.add(kind.__name__, len(value))
            for item in value:  # in the order pickling meets them
                self.walk(item, depth + 1)
        elif kind in _REDUCED_TYPES or kind.__module__.partition(".")[0] in _REDUCED:
            self._reduced(value, depth)
        else:
            raise Refused

    def _immutable(self, value: Any, kind: type, depth: int) -> bool:
        """Digest a value that cannot change and whose identity a pickle does not keep; False if not one."""
        if kind is slice or kind is range:
            self.add(kind.__name__)
            for part in (value.start, value.stop, value.step):
                self.walk(part, depth + 1)
            return True
        if self.dtype is not None and kind.__module__ == "numpy.dtypes" and isinstance(value, self.dtype):
            if value.metadata is not None:
                raise Refused
            self.add("dtype", value.str, value.descr if value.fields is not None else None)
            return True
        if isinstance(value, type) or kind in _FUNCTIONS or kind.__name__ == "cython_function_or_method":
            self.add("global", self._global_name(value))
            return True
        return False

    def _global_name(self, value: Any) -> str:
        """The name a class or function is pickled by; refuse one pickled by value (a notebook's own)."""
        try:
            return _NAMES[value]
        except (KeyError, TypeError):
            pass
        module, name = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
        if not isinstance(module, str) or not isinstance(name, str) or module == "__main__":
            raise Refused
        found: Any = sys.modules.get(module)
        for part in name.split("."):
            found = getattr(found, part, None)
        if found is not value:
            raise Refused
        if isinstance(value, type | types.FunctionType) and (self.by_name is None or not self.by_name(value)):
            raise Refused
        named = f"{module}:{name}"
        try:
            _NAMES[value] = named
        except TypeError:  # not weakly referenceable: looked up each time
            pass
        return named

    def _reduced(self, value: Any, depth: int) -> None:
        # What the pickler calls (after its own overrides, none of which takes these objects).
        kind = type(value)
        if self.dispatch is None or kind in self.dispatch:
            raise Refused
        if _plain_state(kind):
            # Pickled as its class and its own __dict__ (object's reduce): read them, not asked for.
            self.add("object", self._global_name(kind))
            self.walk(vars(value), depth + 1)
            return
        first = value.__reduce_ex__(5)
        if isinstance(first, str):  # pickled by name
            self.add("named", kind.__module__, first)
            return
        first, second = _listed(first), _listed(value.__reduce_ex__(5))
        made: set[int] = set()
        _made_anew(first, second, made, 0)
        self.keep.append(first)  # the made containers stay alive: their ids are not reused meanwhile
        self.add("reduced", kind.__module__, kind.__qualname__)
        self._contents(first, made, depth + 1)

    def _contents(self, value: Any, made: set[int], depth: int) -> None:
        """Walk what a reduce call returned: its own containers by contents, anything else as usual."""
        if id(value) not in made:
            self.walk(value, depth)
            return
        if type(value) not in _CONTAINERS:
            self.made += 1  # what it holds counts, not which objects
            try:
                self.walk(value, depth)
            finally:
                self.made -= 1
            return
        self.items += 1
        if depth > _MAX_DEPTH or self.items > _MAX_ITEMS:
            raise Refused
        if type(value) is dict:
            self.add("made dict", len(value))
            for name, item in value.items():
                self._contents(name, made, depth + 1)
                self._contents(item, made, depth + 1)
        else:
            self.add(f"made {type(value).__name__}", len(value))
            for item in value:
                self._contents(item, made, depth + 1)

    def _array(self, array: Any, depth: int) -> None:
        dtype = array.dtype
        self.add("ndarray", dtype.descr if dtype.fields is not None else dtype.str, array.shape, array.flags.writeable)
        if dtype.hasobject:
            for item in array.ravel(order="K"):
                self.walk(item, depth + 1)
            return
        numpy = sys.modules["numpy"]
        # As bytes: a buffer of datetimes (dtype 'M') cannot be exported as itself.
        self.hasher.update(memoryview(numpy.ascontiguousarray(array).reshape(-1).view(numpy.uint8)))

    def _figure(self, figure: Any) -> None:
        if figure is None:
            raise Refused
        figure = figure.get_figure(root=True) if _has_root(figure) else figure
        key = id(figure)
        if key not in self.figures:
            artists = self.artists.get(key)
            if artists is None:
                artists = self.artists[key] = _artists(figure)
            if _animated(*artists):
                raise Refused
            self.figures[key] = figure
        self.add("figure", id(figure))

    def _artist(self, artist: Any) -> None:
        # A line, a collection, a legend…: matplotlib reports its changes to its figure, as for
        # axes; what is set on it by hand shows in its attributes.
        figure = artist.get_figure(root=True) if _has_root(artist) else artist.figure
        if figure is None or artist.get_animated():
            raise Refused
        self._figure(figure)
        self.add("artist", type(artist).__qualname__)
        self._attributes(artist)

    def _attributes(self, obj: Any) -> None:
        for name, value in vars(obj).items():
            if type(value) in SCALARS:
                self.add(name, value)
            else:
                self.add(name, id(value))
                self.keep.append(value)  # held by the witness: the id stays this object's

    def _estimator(self, estimator: Any, depth: int) -> None:
        kind = type(estimator)
        # A class of its own making pickles what its own __getstate__ or __reduce__ says: not read here.
        if kind.__getstate__ is not self.estimator.__getstate__ or kind.__reduce_ex__ is not object.__reduce_ex__:
            raise Refused
        if getattr(kind, "__slots__", None) or not kind.__module__.startswith("sklearn."):
            raise Refused
        self.add("estimator", kind.__module__, kind.__qualname__)
        self.walk(vars(estimator), depth + 1)


# Library classes and functions found pickled by name (one lookup each, not one per walk).
_NAMES: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _plain_state(kind: type) -> bool:
    """True if pickling an instance takes its class and ``__dict__`` alone (object's own reduce)."""
    try:
        return _PLAIN[kind]
    except KeyError:
        pass
    plain = _PLAIN[kind] = (
        kind.__reduce_ex__ is object.__reduce_ex__
        and kind.__reduce__ is object.__reduce__
        and kind.__getstate__ is object.__getstate__
        and not hasattr(kind, "__slots__")
        and not hasattr(kind, "__getnewargs_ex__")
        and not hasattr(kind, "__getnewargs__")
        and not issubclass(kind, dict | list)
        and kind.__dictoffset__ != 0
    )
    return plain


_PLAIN: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()


def _listed(reduced: Any) -> Any:
    """A reduce result with its list and dict items (iterators) read into lists, as pickling reads them."""
    if not isinstance(reduced, tuple) or len(reduced) < 4:
        return reduced
    items = [None if part is None else list(part) for part in reduced[3:5]]
    return (*reduced[:3], *items, *reduced[5:])


def _made_anew(first: Any, second: Any, made: set[int], depth: int) -> None:
    """Collect the containers and arrays of one reduce call's result that a second call made again
    (not the object's own); refuse when the two calls disagree on their shape."""
    if first is second:
        return
    if type(first) not in _CONTAINERS:
        if type(second) is type(first) and _sealed(first):
            made.add(id(first))  # an index made anew (a frame's items, sliced): pickled alone, so by contents
        elif type(second) is type(first) and plain_array(first):
            # A copy of memory the object holds (a Cython state space's matrices): what it holds is its
            # bytes, hashed; its identity is that of a temporary, a new one at each call.
            made.add(id(first))
        return
    if type(second) is not type(first) or len(second) != len(first) or depth > _MAX_DEPTH:
        raise Refused
    made.add(id(first))
    if type(first) is dict:
        if list(first) != list(second):
            raise Refused
        pairs: Any = zip(first.values(), second.values(), strict=True)
    else:
        pairs = zip(first, second, strict=True)
    for one, other in pairs:
        _made_anew(one, other, made, depth + 1)


def plain_array(value: Any) -> bool:
    """Whether ``value`` is a numpy array of numbers (one of objects could hold shared values)."""
    numpy = sys.modules.get("numpy")
    return numpy is not None and type(value) is numpy.ndarray and not value.dtype.hasobject


def _sealed(value: Any) -> bool:
    # The pickler pickles a pandas Index on its own: what it holds never makes two variables shared.
    pandas = sys.modules.get("pandas")
    return pandas is not None and isinstance(value, pandas.Index)


def _has_root(artist: Any) -> bool:
    method = type(artist).get_figure
    known = _ROOT.get(method)
    if known is not None:
        return known
    try:
        artist.get_figure(root=True)
    except TypeError:  # matplotlib before 3.10
        known = False
    else:
        known = True
    _ROOT[method] = known
    return known


# Whether each get_figure method takes ``root`` (matplotlib 3.10 on).
_ROOT: dict[Any, bool] = {}
