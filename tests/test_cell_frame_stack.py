"""A durable cell's calls never map memory call after call at the end of a frame-stack chunk.

CPython keeps frames in chunks it maps as calls need room and unmaps as they return; a loop
whose calls land just past a chunk's end maps a chunk at every call. Where that happens depends
on how deep the code starts, so durable_nb's own frames below a cell could put a cell's hot loop
there (importing scikit-learn durably made 24,000 more page faults than plain). Counted in page
faults of the thread, not timed: every newly mapped chunk is faulted in when first written.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import pytest
from shellkit import Shell

from durable_nb._frame_room import call_with_room
from durable_nb.engine.pickling import unpickle

pytestmark = pytest.mark.backends("sqlite")

# The worst count of page faults over 1,000 calls of a trivial function, made from every depth
# of recursion up to 400 frames (several chunks of the frame stack).
PROBE = """
import resource as _resource

def _leaf():
    # More locals than _probe has: at a chunk's end where no _probe frame fits, no _leaf frame fits.
    (a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, b0, b1, b2, b3, b4, b5, b6, b7, b8, b9) = range(20)
    return a0

def _probe(depth):
    if depth:
        return _probe(depth - 1)
    before = _resource.getrusage(_resource.RUSAGE_THREAD).ru_minflt
    for _ in range(1000):
        _leaf()
    return _resource.getrusage(_resource.RUSAGE_THREAD).ru_minflt - before

worst_faults = max(_probe(depth) for depth in range(400))
"""


@pytest.fixture
def shell(store_url: str) -> Iterator[Shell]:
    made = Shell(store_url, "frames")
    yield made
    made.close()


def worst_faults() -> int:
    """Run the probe here and return its worst count of page faults."""
    namespace: dict[str, object] = {}
    exec(compile(PROBE, "<probe>", "exec"), namespace)
    return int(namespace["worst_faults"])  # type: ignore[call-overload]


class _Probed:
    """Unpickles to the probe's worst count, measured while unpickling."""

    def __reduce__(self) -> tuple[object, tuple[()]]:
        return worst_faults, ()


@pytest.fixture(scope="module", autouse=True)
def _python_maps_chunks_per_call() -> None:
    if worst_faults() < 1000:
        pytest.skip("this Python does not map a frame-stack chunk per call at a chunk's end")


def test_a_call_with_room_never_maps_a_chunk_per_call() -> None:
    assert call_with_room(worst_faults) < 50


def test_unpickling_values_never_maps_a_chunk_per_call() -> None:
    assert unpickle(pickle.dumps(_Probed()), []) < 50


def test_a_durable_cells_loop_never_maps_a_chunk_per_call(shell: Shell) -> None:
    shell.ok("%%durable probe\n" + PROBE)
    assert shell.ns["worst_faults"] < 50


def test_recursion_in_a_durable_cell_is_as_deep_as_plain(shell: Shell) -> None:
    shell.ok(
        "%%durable deep\n"
        "import sys\n"
        "def down(n):\n"
        "    return down(n - 1) + 1 if n else 0\n"
        "depth = down(sys.getrecursionlimit() - 200)\n"
    )
    assert shell.ns["depth"] == shell.ns["sys"].getrecursionlimit() - 200
    assert call_with_room(sum, range(5)) == 10
    result = shell.run("%%durable endless\ndef forever(n):\n    return forever(n + 1)\nforever(0)\n")
    assert isinstance(result.error_in_exec, RecursionError)
    shell.ok("%%durable after\nafter = depth + 1")
    assert shell.ns["after"] == shell.ns["depth"] + 1
