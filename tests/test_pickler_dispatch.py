"""Our picklers look reducers up in one dict, resolved as cloudpickle resolves them.

cloudpickle keeps its reducers by type in a ChainMap over copyreg's; the C pickler asks a mapping
that is not a dict through Python, for every object it pickles by reducing it. Counted in Python
calls, not timed.
"""

from __future__ import annotations

import copyreg
import cProfile
import io
import pickle
import pstats
from collections import ChainMap
from typing import Any

import cloudpickle

from durable_nb.engine.pickling import pickle_values, unpickle
from durable_nb.store.codec import decode, encode, flat_dispatch_table

KEY = b"k" * 32


class Point:
    """An ordinary object: pickled by reducing it."""

    def __init__(self, x: int) -> None:
        self.x = x


class Registered:
    """Pickled through a reducer registered with copyreg after durable_nb was imported."""

    def __init__(self, value: int) -> None:
        self.value = value


def _rebuild_registered(value: int) -> Registered:
    made = Registered(value)
    made.value = value * 10  # shows the registered reducer ran
    return made


def _chainmap_lookups(action: Any) -> int:
    profile = cProfile.Profile()
    profile.runcall(action)
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    return sum(
        calls
        for (path, _, name), (_, calls, *_rest) in stats.items()
        if name == "__getitem__" and path.endswith("collections/__init__.py")
    )


def test_the_flat_table_resolves_types_as_cloudpickles_chainmap_does() -> None:
    table = cloudpickle.Pickler.dispatch_table
    assert isinstance(table, ChainMap)
    assert flat_dispatch_table() == {kind: table[kind] for kind in table}


def test_pickling_many_objects_makes_no_chainmap_lookup() -> None:
    points = [Point(i) for i in range(500)]
    assert _chainmap_lookups(lambda: pickle_values([points], {"points": points})) == 0
    assert _chainmap_lookups(lambda: encode(points, KEY)) == 0
    # cloudpickle alone asks its ChainMap once per object: what the count would see without the flat table.
    assert _chainmap_lookups(lambda: cloudpickle.Pickler(io.BytesIO()).dump(points)) >= 500


def test_a_reducer_registered_with_copyreg_later_is_used() -> None:
    copyreg.pickle(Registered, lambda obj: (_rebuild_registered, (obj.value,)))
    try:
        value = Registered(4)
        pickled = pickle_values([value], {"value": value})
        assert unpickle(pickled.stream, pickled.buffers).value == 40
        assert decode(encode(value, KEY), KEY).value == 40
    finally:
        del copyreg.dispatch_table[Registered]
    assert pickle.loads(pickle.dumps(Registered(4))).value == 4
