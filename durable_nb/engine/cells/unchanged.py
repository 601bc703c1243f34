"""Tell that a figure or a fitted model is unchanged without pickling it again.

After each cell the tracker must know whether the values a cell could reach changed. Pickling
answers for any value, but a figure with a few plots takes a tenth of a second to pickle and a
fitted forest tens of milliseconds, paid again after every cell that merely uses them. For
these two kinds a cheaper witness is taken when their unit is pickled (``witness``); while it
still holds (``holds``), the pickle is known to be what it was.

- A matplotlib figure (and its axes): every change made through matplotlib marks the artist
  stale, which reaches the figure's ``stale_callback``; a counter wrapped around that callback
  sees each one, also when a later draw clears the flag. Beside it, what the API does not mark:
  the array buffers the pickle wrote (hashed again, byte for byte), the attributes of the figure
  and its axes (one level: an attribute set or replaced by hand), and animated artists (which
  do not report changes) make the witness refuse.
- A scikit-learn estimator: its state (``__dict__``, nested estimators, lists, dicts, arrays
  hashed with xxhash, fitted trees through their own state) is digested in one walk; anything
  else inside (a callable, a random generator, an object of another library) makes it refuse.
- A pandas object or a statsmodels model or result: digested as the pickler would take it
  apart, through its own ``__reduce_ex__`` (a frame's blocks and indexes, a result's state
  dict with its cache, the model and data it holds), array bytes hashed, the objects it reaches
  by identity. What ``__reduce_ex__`` makes anew at each call (a state dict, an argument tuple)
  counts by its contents (as does a numeric array it copies out of compiled memory, as the state
  space models' objects do): it is told apart from the object's own by asking twice.
  Classes and functions count by name only where they are pickled by name.

A witness that cannot vouch for a value returns None, and the value is pickled as before:
unsure means pickle again, never "unchanged".
"""

from __future__ import annotations

import collections
import operator
import sys
import weakref
from collections.abc import Callable
from typing import Any

import xxhash

from .value_digest import SCALARS, Digest, Refused, plain_array

__all__ = ["Witness", "holds", "witness"]


class _FigureWatch:
    """Wraps a figure's ``stale_callback``: counts the changes matplotlib reports, then passes them on."""

    __slots__ = ("changes", "inner")

    def __init__(self, inner: Callable[..., Any] | None) -> None:
        self.inner = inner
        self.changes = 0

    def __call__(self, artist: Any, value: Any) -> None:
        self.changes += 1
        if self.inner is not None:
            self.inner(artist, value)


def _watch_of(figure: Any) -> _FigureWatch:
    callback = figure.stale_callback
    if isinstance(callback, _FigureWatch):
        return callback
    watch = _FigureWatch(callback)
    figure.stale_callback = watch
    return watch


class _Attributes:
    """An object's attributes as they were: the values themselves, held (so no id is reused meanwhile)."""

    __slots__ = ("keys", "values")

    def __init__(self, obj: Any) -> None:
        attributes = vars(obj)
        self.keys = tuple(attributes)
        self.values = tuple(attributes.values())

    def same(self, obj: Any) -> bool:
        """True if ``obj`` has the same attributes, each the same object (or an equal number or text)."""
        now = vars(obj)
        if len(now) != len(self.keys):
            return False
        # Mostly each the very same object: compared in C, without a call per attribute.
        if tuple(now) == self.keys and all(map(operator.is_, now.values(), self.values)):
            return True
        for key, value in zip(self.keys, self.values, strict=True):
            current = now.get(key, _MISSING)
            if current is not value and not (
                type(value) in SCALARS and type(current) is type(value) and current == value
            ):
                return False
        return True


_MISSING = object()


class _FigureWitness:
    """What one figure was when its unit was pickled."""

    __slots__ = ("artists", "attributes", "axes", "changes", "figure", "watch")

    def __init__(self, figure: Any, artists: tuple[tuple[Any, ...], bool]) -> None:
        self.figure = weakref.ref(figure)
        # Held: while the figure reports no change, it holds these artists (adding or removing one
        # marks it stale), and only their animated flags are read again.
        self.artists = artists
        self.watch = _watch_of(figure)
        self.changes = self.watch.changes
        self.axes = tuple(figure.axes)  # held: their identities are compared
        self.attributes = [_Attributes(figure), *(_Attributes(ax) for ax in self.axes)]

    def holds(self) -> bool:
        figure = self.figure()
        if figure is None or figure.stale_callback is not self.watch or self.watch.changes != self.changes:
            return False
        if tuple(figure.axes) != self.axes:
            return False
        return all(held.same(obj) for held, obj in zip(self.attributes, (figure, *self.axes), strict=True))


class Witness:
    """Proof that a unit's values pickle as they did: figures watched, estimators digested, buffers hashed."""

    __slots__ = ("buffers", "bytes", "digest", "figures", "kept", "layout", "values")

    def __init__(
        self,
        values: list[Any],
        figures: list[_FigureWitness],
        digest: Digest,
        buffers: list[Any],
    ) -> None:
        self.values = [weakref.ref(v) if _weakrefable(v) else v for v in values]
        self.kept = digest.keep  # the objects whose identities the digest holds: none is freed and its id reused
        self.figures = figures
        self.digest = digest.hexdigest()
        # Their bytes as memory views, made once, and one digest of all of them: a figure holds
        # thousands of small arrays, and a view and a hasher for each cost more than the hashing.
        self.buffers = [buffer.raw() for buffer in buffers]
        # Each view's length and whether it is read-only: a view's, fixed once it is made.
        self.layout = repr([(view.nbytes, view.readonly) for view in self.buffers]).encode()
        self.bytes = _buffers_digest(self.buffers, self.layout)


def _buffers_digest(views: list[memoryview], layout: bytes) -> str:
    """The digest of out-of-band buffers' bytes and their ``layout``."""
    hasher = xxhash.xxh3_128()
    # Hashed in C, with no call per view (a figure's pickle writes thousands).
    collections.deque(map(hasher.update, views), maxlen=0)
    hasher.update(layout)
    return hasher.hexdigest()


def _weakrefable(value: Any) -> bool:
    try:
        weakref.ref(value)
    except TypeError:
        return False
    return True


def _resolve(held: Any) -> Any:
    return held() if isinstance(held, weakref.ref) else held


def witness(values: list[Any], buffers: list[Any]) -> Witness | None:
    """Take a witness of a unit's values just pickled (``buffers``: its out-of-band buffers, kept and
    hashed again only for figures, whose arrays the walk does not read).

    None unless a value is a figure, its axes, a scikit-learn estimator, a pandas object or a
    statsmodels one, the others numeric arrays (a model's data) or numbers, nothing holding anything
    else: such a unit is pickled each time to compare.
    """
    digest = Digest()
    try:
        watched = [_watchable(value, digest) for value in values]
        if not any(watched) or not all(w or _plain(v) for w, v in zip(watched, values, strict=True)):
            return None
        for value in values:
            digest.walk(value)
        figures = [_FigureWitness(figure, digest.artists[key]) for key, figure in digest.figures.items()]
    except Refused:
        return None
    except Exception:  # noqa: BLE001 - a library object that fails to describe itself is simply pickled
        return None
    if not figures:
        buffers = []
    return Witness(values, figures, digest, buffers)


def _watchable(value: Any, digest: Digest, depth: int = 0) -> bool:
    """Only what holds figures, their artists or estimators is worth a witness: those values (or
    lists, tuples and object arrays of them, beside plain arrays) are costly to pickle; anything
    else is cheap to pickle."""
    kinds = (digest.figure_type, digest.axes_type, digest.artist_type, digest.container_type, digest.estimator)
    found = tuple(k for k in kinds if k is not None)
    if isinstance(value, found) or _library_object(value):
        return True
    ndarray = digest.ndarray
    if ndarray is not None and type(value) is ndarray:
        return bool(value.dtype.hasobject and value.size and all(isinstance(i, found) for i in value.flat))
    if type(value) in (list, tuple) and value and depth == 0:
        plain = (ndarray,) if ndarray is not None else ()
        return any(_watchable(item, digest, 1) for item in value) and all(
            _watchable(item, digest, 1) or isinstance(item, plain) or type(item) in SCALARS for item in value
        )
    return False


def _plain(value: Any) -> bool:
    """A numeric array or a number: cheap to digest, worth no witness alone, none needed beside one
    (the array a model was fitted on, kept in its unit)."""
    return plain_array(value) or type(value) in SCALARS


def _library_object(value: Any) -> bool:
    """A pandas frame, series or index, or a statsmodels object: costly to pickle, digested through its reduce."""
    module = type(value).__module__
    if module.startswith("statsmodels."):
        return True
    pandas = sys.modules.get("pandas")
    return (
        pandas is not None
        and module.startswith("pandas")
        and isinstance(value, pandas.DataFrame | pandas.Series | pandas.Index)
    )


def holds(held: Witness, values: list[Any]) -> bool:
    """True if ``values`` are the objects the witness was taken of, and none of them changed since."""
    if len(values) != len(held.values) or any(_resolve(h) is not v for h, v in zip(held.values, values, strict=True)):
        return False
    if not all(figure.holds() for figure in held.figures):
        return False
    if held.buffers and _buffers_digest(held.buffers, held.layout) != held.bytes:
        return False
    again = Digest({id(figure.figure()): figure.artists for figure in held.figures})
    try:
        for value in values:
            again.walk(value)
    except Exception:  # noqa: BLE001 - it no longer describes itself: pickled again
        return False
    return again.hexdigest() == held.digest
