"""Which objects a pickle reached that tie two variables together.

Two variables that reach a common mutable object must be stored together, or a restore gives
each its own copy. The pickler's memo lists everything a pickle met; this module keeps the
objects whose identity can matter, leaving out those that cannot change, those pickled by name
(they come back as themselves), the pickler's own temporaries, and what pandas and matplotlib
hold for the whole process (``library_held``).
"""

from __future__ import annotations

import enum
import gc
import io
import operator
import pickle
import sys
import types
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from itertools import compress
from typing import Any

__all__ = ["importable", "reached"]

# Objects whose identity cannot matter: they cannot change, or are looked up by name on load.
_IMMUTABLE = (
    str,
    bytes,
    int,
    float,
    complex,
    bool,
    tuple,
    frozenset,
    range,
    slice,
    type,
    types.ModuleType,
    types.BuiltinFunctionType,
    types.CodeType,
    types.MethodType,
    type(None),
)


def _type_verdict(kind: type, immutable: tuple[type, ...]) -> bool | None:
    """What a type alone says of sharing its instances: never matters, matters, or ask the instance."""
    if issubclass(kind, immutable):
        return False
    if kind is types.FunctionType:
        return None
    if not (kind.__hash__ is None or kind.__dictoffset__ != 0 or kind is types.CellType):
        return kind in _STATEFUL
    # Objects pickled by name (a compiled library function, say) come back as themselves.
    named = any("__qualname__" in vars(base) for base in kind.__mro__ if base is not object)
    return None if named else True


def _mutable(obj: Any, namespace: Mapping[str, Any], immutable: tuple[type, ...], verdicts: dict[type, Any]) -> bool:
    """Tell whether two values holding ``obj`` must be stored together for a restore to keep it one object."""
    kind = type(obj)
    verdict = verdicts.get(kind, _UNKNOWN)
    if verdict is _UNKNOWN:
        verdict = verdicts[kind] = _type_verdict(kind, immutable)
    if verdict is not None:
        return bool(verdict)
    if kind is types.FunctionType:
        # A function from a module is pickled by name and comes back as itself.
        return obj.__globals__ is namespace
    return not importable(obj)


_UNKNOWN = object()


def importable(obj: Any) -> bool:
    """True if ``obj`` is pickled by name and comes back as itself (a library's class or function)."""
    qualname = getattr(obj, "__qualname__", None)
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    if not isinstance(qualname, str) or module is None:
        return False
    found: Any = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found is obj


# Library objects that change in place yet hash by identity and keep no __dict__, which the type
# test reads as unchangeable: numpy's random generators. One passed to two estimators (scikit-learn's
# ``random_state=rng``) and advanced by a later cell must come back as one object.
_STATEFUL: set[type] = set()


def _note_stateful(random: Any) -> None:
    """Take numpy.random's generator types (every bit generator too) as ones whose sharing matters."""
    pending = [random.BitGenerator]
    while pending:
        kind = pending.pop()
        _STATEFUL.add(kind)
        pending.extend(kind.__subclasses__())
    _STATEFUL.update((random.RandomState, random.Generator, random.SeedSequence))


def _immutable_types() -> tuple[type, ...]:
    # Library types whose instances never change: sharing one between two variables needs no care.
    extra: list[type] = [enum.Enum]
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        extra += [numpy.dtype, numpy.generic]
        # numpy loads numpy.random on first use: until a cell has, no generator exists to note.
        random = sys.modules.get("numpy.random")
        if random is not None and not _STATEFUL:
            _note_stateful(random)
    pandas = sys.modules.get("pandas")
    if pandas is not None:
        extra += [pandas.api.extensions.ExtensionDtype, pandas.Index]
    return (*_IMMUTABLE, *extra)


def _made_while_pickling(memo: dict[int, tuple[int, Any]], buffers: Sequence[Any]) -> set[int]:
    """The ids of objects made while pickling: held by the memo (and the out-of-band ``buffers``) only,
    and large arrays held by nothing else than such objects.

    A reducer's state dict is held by the memo alone. Freed once the pickle is done, its id is
    reused by anything and must never make two values look shared. The tracker keeps what a
    pickle reached alive (so that its ids stay its own): a large array a reducer copied into its
    state must not be kept with it, so those are looked for too (smaller ones cost little to keep).
    """
    counts = _reference_counts(memo)
    for key, held in Counter(map(id, gc.get_referents(*buffers))).items():
        if key in counts:
            counts[key] -= held
    # Picked in C (compress): a figure's memo holds tens of thousands of objects.
    made = set(compress(counts, map(_MEMO_ONLY.__ge__, counts.values())))
    numpy = sys.modules.get("numpy")
    ndarray = numpy.ndarray if numpy is not None else None
    once = compress(counts, map((_MEMO_ONLY + 1).__eq__, counts.values()))
    large = {key for key in once if type(memo[key][1]) is ndarray and _large_array(memo[key][1])}
    if large and made:
        for referent in gc.get_referents(*(memo[key][1] for key in made)):
            if id(referent) in large:
                made.add(id(referent))
    return made


def _large_array(obj: Any) -> bool:
    numpy = sys.modules.get("numpy")
    return numpy is not None and type(obj) is numpy.ndarray and obj.base is None and obj.nbytes >= _LARGE


_LARGE = 1 << 20


def reached(
    memo: dict[int, tuple[int, Any]],
    namespace: Mapping[str, Any],
    buffers: Sequence[Any] = (),
    by_name: Collection[int] = (),
) -> list[int]:
    """Return the ids of the mutable objects a pickle met, leaving out the pickler's own temporaries
    (``buffers``: the pickle's out-of-band buffers, which hold the arrays they were taken from) and
    the objects pickled by name (``by_name``: they come back as themselves)."""
    found = []
    immutable = _immutable_types()
    verdicts: dict[type, Any] = {}
    made = _made_while_pickling(memo, buffers)
    if by_name:
        made |= set(by_name)
    for key, entry in memo.items():
        if key not in made and _mutable(entry[1], namespace, immutable, verdicts):
            found.append(key)
    if found:
        # Imported here: attaching a kernel stays light.
        from .library_held import without_library_held

        found = without_library_held(found, memo, {type(entry[1]) for entry in memo.values()})
    return found


def _reference_counts(memo: dict[int, tuple[int, Any]]) -> dict[int, int]:
    """Each memo object's reference count by its key, counted in C (one call per object costs more)."""
    objects = list(map(_SECOND, memo.values()))
    return dict(zip(memo, map(sys.getrefcount, objects), strict=True))


def _memo_only_references() -> int:
    file = io.BytesIO()
    pickler = pickle.Pickler(file, protocol=5)
    pickler.dump([{}])  # the list and the dict are held by nothing but the memo once dumped
    return max(_reference_counts(pickler.memo.copy()).values()) - 1  # the dict is also held by the list


_SECOND = operator.itemgetter(1)
_MEMO_ONLY = _memo_only_references()
