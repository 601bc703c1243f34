"""Pickle a notebook's variables so that a restore gives back the same objects.

Four things plain pickling gets wrong for a namespace, and what this module does instead:

- Functions and classes defined in the notebook read their globals from the namespace they
  were defined in. cloudpickle gives each restored function a private copy of the globals it
  used, frozen at pickling time; here they are rebuilt over the namespace they are restored
  into, so they see later assignments as they did before.
- A numpy view of an array that is itself a variable is rebuilt as a view of that array, so
  that writing through one is seen through the other (views of arrays that are not variables,
  as inside pandas objects, are stored as copies, which is what pandas' copy-on-write expects).
- An object a library made at import and holds as a module global (``scipy.stats.t``, which a
  statsmodels prediction keeps) is pickled by its module and name, as the library's classes
  are, so that it comes back as the library's own rather than a copy (``module_singletons``).
- Large array buffers go out of band: they are hashed quickly to tell whether a value
  changed, and stored as blobs of their own, written once however many times the value is.

Pickling also reports what a value reaches: the ids of the mutable objects in it (two
variables that reach a common object must be stored together; which objects count is
``pickle_reach``'s business), the global names its functions read, and the matplotlib figures
it holds.
"""

from __future__ import annotations

import array
import bisect
import builtins
import functools
import importlib
import io
import pickle
import sys
import types
from collections import Counter
from collections.abc import Container, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import cloudpickle
import xxhash

from .._collector import collector_paused
from .._formulas import call_in_namespace, data_class, reduce_formula_data
from .._formulas import restore_target as _target
from .._frame_room import call_with_room
from ..store.codec import flat_dispatch_table, is_file_type, refuse_open_file
from .cells.pickle_reach import importable, reached

__all__ = ["Pickled", "buffer_digest", "in_reach", "pickle_values", "restoring_into", "take_imported", "unpickle"]


class Pickled:
    """One pickle of one or more values, with what it reaches and a fingerprint of its content."""

    stream: bytes
    buffers: list[pickle.PickleBuffer]
    reach: array.array[int]  # the ids of the mutable objects reached, sorted, each once
    uses: frozenset[str]
    figures: frozenset[int]
    fingerprint: str
    buffer_digests: list[str]
    # The pickler's memo, kept while a plan compares pickles: objects made while pickling stay
    # alive, so no two pickles of one plan can see the same id for different objects.
    memo: Any
    # The objects ``reach`` names, kept as long as the reach is: an object made while pickling
    # that the memo test misses (a compiled object's state arrays) keeps its id, never reused by
    # another value's object to make the two look shared.
    held: list[Any] | None

    __slots__ = ("buffer_digests", "buffers", "figures", "fingerprint", "held", "memo", "reach", "stream", "uses")

    def __init__(
        self,
        stream: bytes,
        buffers: list[pickle.PickleBuffer],
        reach: array.array[int],
        uses: frozenset[str],
        figures: frozenset[int],
        fingerprint: str,
        buffer_digests: list[str],
        memo: Any = None,
        held: list[Any] | None = None,
    ) -> None:
        self.stream = stream
        self.buffers = buffers
        self.reach = reach
        self.uses = uses
        self.figures = figures
        self.fingerprint = fingerprint
        self.buffer_digests = buffer_digests
        self.memo = memo
        self.held = held


def in_reach(reach: array.array[int], object_id: int) -> bool:
    """Whether a pickle's reach (sorted ids) holds ``object_id``."""
    position = bisect.bisect_left(reach, object_id)
    return position < len(reach) and reach[position] == object_id


# -- what a restore calls ---------------------------------------------------------------------


def _namespace() -> dict[str, Any]:
    target = _target.get()
    # Outside a restore (a view loading values in a script) a function gets globals of its own.
    return target if target is not None else {"__builtins__": builtins}


def _make_function(code: types.CodeType, name: str, cells: tuple[Any, ...]) -> types.FunctionType:
    return types.FunctionType(code, _namespace(), name, None, cells)


_FUNCTION_ATTRIBUTES = ("__defaults__", "__kwdefaults__", "__qualname__", "__doc__", "__annotations__", "__module__")


def _set_function_state(function: types.FunctionType, state: tuple[Any, ...]) -> types.FunctionType:
    *attributes, namespace, contents = state
    for name, value in zip(_FUNCTION_ATTRIBUTES, attributes, strict=True):
        setattr(function, name, value)
    function.__dict__.update(namespace)
    for cell, value in zip(function.__closure__ or (), contents, strict=True):
        if value is not _EMPTY_MARK:
            cell.cell_contents = value
    return function


def _empty_cell() -> Any:
    return types.CellType()


def _array_view(
    root: Any, offset: int, shape: tuple[int, ...], strides: tuple[int, ...], dtype: Any, writeable: bool
) -> Any:
    import numpy as np

    view = np.ndarray(shape, dtype, buffer=root, offset=offset, strides=strides)
    if not writeable:
        view.flags.writeable = False
    return view


class _EmptyMark:
    """Stands for an empty closure cell in a pickled function's state."""

    def __reduce__(self) -> str:
        return "_EMPTY_MARK"


_EMPTY_MARK = _EmptyMark()


@contextmanager
def restoring_into(namespace: dict[str, Any] | None) -> Iterator[None]:
    """Rebuild notebook functions over ``namespace`` while unpickling inside this block."""
    token = _target.set(namespace)
    try:
        yield
    finally:
        _target.reset(token)


def unpickle(stream: Any, buffers: list[Any]) -> Any:
    """Load a stream written by ``pickle_values`` with its out-of-band buffers.

    Inside ``restoring_into`` the load is called from frames over that namespace, as if a cell
    unpickled: a library that reads its callers' frames while unpickling (statsmodels evaluates a
    model's formula again, and patsy looks its names up in such a frame and keeps its compiler
    flags) finds the notebook's names, not durable_nb's module.
    """
    load = functools.partial(pickle.loads, stream, buffers=buffers)
    namespace = _target.get()
    # Loading a figure makes tens of thousands of objects, all kept: left on, the collector walks
    # them (and the notebook's heap) again and again meanwhile, as when pickling.
    # Unpickling imports the modules values need, in frames below durable_nb's own: given room on
    # the frame stack, its loops do not map memory call after call (see call_with_room).
    with collector_paused():
        if namespace is None:
            return call_with_room(load)
        return call_with_room(call_in_namespace, namespace, load)


_SINGLETONS = f"{__package__}.module_singletons"
_UNREAD: Any = object()  # stands for a type whose library's singletons were not asked for yet


# How many modules were loaded when the singleton index last took the new ones.
_modules_taken = -1


def take_imported() -> None:
    """Take the globals of the modules imported since the last call, for the singleton index.

    Called as each cell is committed: the cell that imported a library pays for the copy (a few
    milliseconds next to the import's hundreds), not the first later cell that pickles one of its
    objects (a cell of numbers right after a cell of imports).
    """
    global _modules_taken
    if len(sys.modules) == _modules_taken:
        return
    module_singletons = sys.modules.get(_SINGLETONS) or importlib.import_module(_SINGLETONS)
    module_singletons.refresh()
    _modules_taken = len(sys.modules)


def _singleton_ids(kind: type) -> Container[int] | None:
    # Imported here: attaching a kernel, and a cell of plain numbers, load no module for it.
    from . import module_singletons

    return module_singletons.index_for(kind)


def _by_name(kind: type, obj: Any) -> bool:
    """True if ``obj`` is a library's object pickled by its name, told without running code of its own."""
    try:
        # A proxy's __getattr__ would be asked for the names: such an object is looked up as any other.
        return not hasattr(kind, "__getattr__") and importable(obj)
    except Exception:  # noqa: BLE001 - an object that refuses to be asked is looked up as any other
        return False


def _module_global(module: str, name: str) -> Any:
    """The object a library module holds under ``name`` (a singleton pickled by its name)."""
    return getattr(importlib.import_module(module), name)


def _new_instance(kind: type) -> Any:
    return kind.__new__(kind)


def _reduce_callbacks(registry: Any) -> Any:
    """Pickle a matplotlib callback registry the same way each time.

    Its own pickling draws a fresh callback id from a counter, so every figure pickles to new
    bytes and would look changed at every cell. The id a restored registry counts on from only
    has to be above the ids it keeps.
    """
    state = registry.__getstate__()
    kept = [cid for callbacks in state.get("callbacks", {}).values() for cid in callbacks]
    if "_cid_gen" in state:
        state["_cid_gen"] = max(kept, default=-1) + 1
    return (_new_instance, (type(registry),), state)


def _load_sealed(stream: bytes, *buffers: Any) -> Any:
    return pickle.loads(stream, buffers=buffers)


def _seal(obj: Any) -> Any:
    """Pickle an immutable library object on its own, so that what is inside it (a pandas Index
    shared by a frame and a row taken from it) never makes two variables look shared."""
    file = io.BytesIO()
    buffers: list[pickle.PickleBuffer] = []
    try:
        pickle.Pickler(file, protocol=5, buffer_callback=buffers.append).dump(obj)
    except Exception:  # noqa: BLE001 - not picklable alone (a notebook class inside): pickled as usual
        return NotImplemented
    return (_load_sealed, (file.getvalue(), *buffers))


# -- pickling --------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _names_read(code: types.CodeType) -> frozenset[str]:
    # co_names holds attribute names as well as globals: an over-estimate, which is safe here.
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _names_read(constant)
    return frozenset(names)


def _bottom(array: Any, ndarray: type) -> Any:
    # numpy keeps a view's base pointing at the array that holds the memory, not at the
    # view it was taken from: one step is usually all there is.
    while isinstance(array.base, ndarray):
        array = array.base
    return array


def _address(array: Any) -> int:
    return int(array.__array_interface__["data"][0])


class _NamespacePickler(cloudpickle.Pickler):
    """cloudpickle, with notebook functions bound to their namespace and views kept as views."""

    def __init__(
        self, file: io.BytesIO, namespace: Mapping[str, Any], arrays: frozenset[int], shared: frozenset[int]
    ) -> None:
        self.buffers: list[pickle.PickleBuffer] = []
        self.dispatch_table = flat_dispatch_table()  # read by the C pickler as it is made
        super().__init__(file, protocol=5, buffer_callback=self.buffers.append)
        self.namespace = namespace
        self.arrays = arrays
        self.shared = shared
        self.uses: set[str] = set()
        self.figures: set[int] = set()
        self.extra_reach: list[Any] = []
        self.by_name: set[int] = set()  # library singletons pickled by their module and name
        # Per type met: the ids of its library's singletons (None: no object of that type can be one).
        self._singletons: dict[type, Container[int] | None] = {}
        self._closure_cells: set[int] = set()
        self._file_types: dict[type, bool] = {}
        numpy = sys.modules.get("numpy")
        self._ndarray: type | None = numpy.ndarray if numpy is not None else None
        figure_module = sys.modules.get("matplotlib.figure")
        self._figure: type | None = getattr(figure_module, "Figure", None)
        pandas = sys.modules.get("pandas")
        self._sealed: tuple[type, ...] = (pandas.Index,) if pandas is not None else ()
        self._callbacks: type | None = getattr(sys.modules.get("matplotlib.cbook"), "CallbackRegistry", None)
        self._model_data = data_class()

    def reducer_override(self, obj: Any) -> Any:
        kind = type(obj)
        # Asked once per type: io.IOBase is an ABC, whose isinstance runs Python for every object pickled.
        is_file = self._file_types.get(kind)
        if is_file is None:
            is_file = self._file_types[kind] = is_file_type(kind)
        if is_file or obj.__class__ is not kind:
            refuse_open_file(obj)
        if kind is types.FunctionType:
            if obj.__globals__ is self.namespace:
                return self._reduce_function(obj)
            rebuild = obj.__dict__.get("__durable_nb_rebuild__")
            if rebuild is not None:  # a wrapper of durable_nb's own (@idempotent): rebuilt by wrapping again
                return rebuild
        if kind is types.CellType and id(obj) in self._closure_cells:
            return (_empty_cell, ())
        if kind is self._ndarray and obj.base is not None:
            reduced = self._reduce_view(obj)
            if reduced is not None:
                return reduced
        if self._figure is not None and isinstance(obj, self._figure):
            self.figures.add(id(obj))
        if self._sealed and isinstance(obj, self._sealed):
            return _seal(obj)
        if kind is self._callbacks:
            return _reduce_callbacks(obj)
        if self._model_data is not None and issubclass(kind, self._model_data):
            reduced = reduce_formula_data(obj)
            if reduced is not None:
                return reduced
        singletons = self._singletons.get(kind, _UNREAD)
        if singletons is _UNREAD:
            # A library's function-like object (numpy's ufuncs and dispatchers) is pickled by name:
            # a cell of imports has no library's globals read for it.
            if _by_name(kind, obj):
                return super().reducer_override(obj)
            singletons = self._singletons[kind] = _singleton_ids(kind)
        if singletons is not None and id(obj) in singletons:
            held = sys.modules[_SINGLETONS].module_name_of(obj)
            if held is not None:
                self.by_name.add(id(obj))
                return (_module_global, held)
        return super().reducer_override(obj)

    def _reduce_function(self, function: types.FunctionType) -> Any:
        self.uses |= _names_read(function.__code__)
        cells = function.__closure__ or ()
        self._closure_cells.update(id(cell) for cell in cells)
        contents = []
        for cell in cells:
            try:
                contents.append(cell.cell_contents)
            except ValueError:  # a cell not yet filled (a name assigned after the function)
                contents.append(_EMPTY_MARK)
        # A tuple of the function's own objects: a container made here would be a temporary
        # whose id could pass for another value's object.
        state = (*(getattr(function, name) for name in _FUNCTION_ATTRIBUTES), function.__dict__, tuple(contents))
        return (_make_function, (function.__code__, function.__name__, cells), state, None, None, _set_function_state)

    def _reduce_view(self, array: Any) -> Any:
        bottom = _bottom(array, self._ndarray)  # type: ignore[arg-type]
        if bottom is array:
            # Its memory is another object's, not an array's (a Cython memoryview scikit-learn
            # returns as an array): no array to view, so it is pickled as an array of its own.
            return None
        # Two values viewing the same memory share it: they must be stored together.
        self.extra_reach.append(bottom)
        # Rebuilt as a view when the memory is a variable's, or when two variables view it.
        kept = id(bottom) in self.arrays or (id(array) in self.arrays and id(bottom) in self.shared)
        if not kept or type(bottom) is not self._ndarray or array.dtype.hasobject:
            return None
        if not (bottom.flags.c_contiguous or bottom.flags.f_contiguous):
            return None
        offset = _address(array) - _address(bottom)
        return (_array_view, (bottom, offset, array.shape, array.strides, array.dtype, bool(array.flags.writeable)))


def buffer_digest(raw: memoryview) -> str:
    """Return a fast digest of a buffer's bytes and writability (to recognise it, not to sign it)."""
    hasher = xxhash.xxh3_128(raw)
    hasher.update(b"R" if raw.readonly else b"W")
    return hasher.hexdigest()


def _fingerprint(stream: bytes, digests: list[str]) -> str:
    hasher = xxhash.xxh3_128(stream)
    for digest in digests:
        hasher.update(digest.encode())
    return hasher.hexdigest()


def pickle_values(values: list[Any], namespace: Mapping[str, Any]) -> Pickled:
    """Pickle ``values`` together (one value alone is pickled as itself, several as a tuple).

    Raises what pickling raises when a value cannot be pickled.
    """
    numpy = sys.modules.get("numpy")  # no numpy array can be among values before numpy is imported
    ndarray = numpy.ndarray if numpy is not None else None
    file = io.BytesIO()
    arrays = [v for v in values if ndarray is not None and type(v) is ndarray]
    bottoms = Counter(id(_bottom(a, ndarray)) for a in arrays if a.base is not None)
    shared = frozenset(key for key, count in bottoms.items() if count > 1)
    pickler = _NamespacePickler(file, namespace, frozenset(id(a) for a in arrays), shared)
    # Pickling a figure allocates tens of thousands of objects: left on, the collector walks the
    # whole notebook's heap again and again meanwhile (several times the pickle's own cost).
    with collector_paused():
        pickler.dump(values[0] if len(values) == 1 else tuple(values))
        memo = pickler.memo.copy()
        ids = reached(memo, namespace, pickler.buffers, pickler.by_name)
    held = [memo[key][1] for key in ids]
    held.extend(pickler.extra_reach)
    ids.extend(id(bottom) for bottom in pickler.extra_reach)
    reach = array.array("q", sorted(set(ids)))
    stream = file.getvalue()
    digests = [buffer_digest(buffer.raw()) for buffer in pickler.buffers]
    return Pickled(
        stream=stream,
        buffers=pickler.buffers,
        reach=reach,
        uses=frozenset(pickler.uses),
        figures=frozenset(pickler.figures),
        fingerprint=_fingerprint(stream, digests),
        buffer_digests=digests,
        memo=memo,
        held=held,
    )
