"""While a durable cell's code runs, durable_nb runs nothing beside it and leaves the process as a plain kernel has it.

A fitted model that took longer in a durable kernel than in a plain one would point at durable_nb
working meanwhile (a thread waking up and taking the GIL) or at process state it changed (garbage
collector settings, warning filters, a trace hook, the thread switch interval). None of this is
timed here: the wake-ups of durable_nb's threads and the state are counted and compared with a
plain kernel's, in real kernels.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernelkit import Kernel

pytestmark = [
    pytest.mark.slow,
    pytest.mark.backends("sqlite"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads thread switches from /proc"),
]

# A module of the user's: warnings raised from it are remembered in its __warningregistry__,
# whose "version" is the warning filters' version when it last warned (each change of the
# filters, a catch_warnings block included, bumps it and makes Python show old warnings again).
WARNER = "import warnings\n\ndef warn():\n    warnings.warn('once per place', UserWarning)\n"

# "{reading}" makes each reading a cell of its own (a durable cell run again unchanged is restored).
STATE = """\
# reading {reading}
import gc, json, os, sys, warnings, warner
warner.warn()
print("STATE", json.dumps({
    "gc": [gc.isenabled(), list(gc.get_threshold()), gc.get_freeze_count(), len(gc.callbacks)],
    "hooks": [repr(sys.gettrace()), repr(sys.getprofile())],
    "switch": sys.getswitchinterval(),
    "threads_env": sorted(k for k in os.environ if "THREAD" in k),
    "filters": [repr(f) for f in warnings.filters],
    "filters_version": warner.__warningregistry__["version"],
}))
"""

# The cell's own code sleeps while it counts how often each of durable_nb's threads woke up.
WAKEUPS = """\
import json, threading, time

def _switches(native_id):
    status = open(f"/proc/self/task/{native_id}/status").read()
    return sum(int(line.split()[1]) for line in status.splitlines() if "ctxt_switches:" in line)

_ours = {t.name: t.native_id for t in threading.enumerate() if t.name.startswith("durable-nb")}
_before = {name: _switches(tid) for name, tid in _ours.items()}
time.sleep(1.5)
print("WAKEUPS", json.dumps({name: _switches(tid) - _before[name] for name, tid in _ours.items()}))
"""

# What the cells use, imported before the first reading: importing a library changes the warning
# filters many times over, in any kernel.
IMPORTS = "import numpy as np\nimport matplotlib\nmatplotlib.use('agg')\nimport matplotlib.pyplot as plt"

# Cells whose commits pickle arrays, a figure (pickled with the collector off) and a function.
WORK = [
    "values = np.arange(100_000.0).reshape(1000, 100)\nmeans = values.mean(axis=0)",
    "fig, ax = plt.subplots()\nax.plot(means)\nlabels = {'title': 'means'}",
    "def scale(x):\n    return 2 * x\nscaled = scale(means)\nvalues[0, 0] = -1.0",
]


def _printed(text: str, marker: str) -> dict:
    line = next(line for line in text.splitlines() if line.startswith(marker))
    return json.loads(line[len(marker) :])


@pytest.fixture
def kernel_pair(tmp_path: Path, store_url: str) -> Iterator[tuple[Kernel, Kernel]]:
    (tmp_path / "warner.py").write_text(WARNER)
    env = {"PYTHONPATH": f"{tmp_path}:{Path(__file__).resolve().parent.parent}", "MPLBACKEND": "agg"}
    plain = Kernel(tmp_path, env=env)
    durable = Kernel(tmp_path, env={**env, "DURABLE_NB_STORE": store_url})
    try:
        yield plain, durable
    finally:
        plain.close()
        durable.close()


def test_durable_cells_leave_the_process_as_a_plain_kernel_has_it(kernel_pair: tuple[Kernel, Kernel]) -> None:
    """gc settings, hooks, switch interval, thread variables and warning filters: as in a plain kernel,
    and no change of the warning filters (which would show old warnings again) across committed cells."""
    plain, durable = kernel_pair
    assert durable.run("%load_ext durable_nb\n%durable run quiet --all").status == "ok"
    states = {}
    for name, kernel in (("plain", plain), ("durable", durable)):
        assert kernel.run(IMPORTS).status == "ok"
        first = kernel.run(STATE.replace("{reading}", "first"))
        assert first.status == "ok", first.text
        for cell in WORK:
            result = kernel.run(cell)
            assert result.status == "ok", result.text
        last = kernel.run(STATE.replace("{reading}", "last"))
        assert last.status == "ok", last.text
        states[name] = (_printed(first.text, "STATE"), _printed(last.text, "STATE"))
    (plain_first, plain_last), (durable_first, durable_last) = states["plain"], states["durable"]
    filter_changes = durable_last.pop("filters_version") - durable_first.pop("filters_version")
    plain_changes = plain_last.pop("filters_version") - plain_first.pop("filters_version")
    assert filter_changes == plain_changes
    plain_last.pop("filters")
    plain_first.pop("filters")
    assert durable_first.pop("filters") == durable_last.pop("filters")
    assert durable_first == plain_first
    assert durable_last == plain_last


def test_no_thread_of_durable_nb_wakes_while_a_cell_runs(kernel_pair: tuple[Kernel, Kernel]) -> None:
    """durable_nb's threads (its lease keeper's, and its event loop's were one started) sleep while the
    cell's own code runs: none takes the GIL from it, however many cells were committed before."""
    _, durable = kernel_pair
    assert durable.run("%load_ext durable_nb\n%durable run quiet --all").status == "ok"
    for cell in [IMPORTS, *WORK]:
        result = durable.run(cell)
        assert result.status == "ok", result.text
    result = durable.run(WAKEUPS)
    assert result.status == "ok", result.text
    wakeups = _printed(result.text, "WAKEUPS")
    assert "durable-nb-kernel-lease" in wakeups  # the count below is of a real thread
    # Attaching and the commits ran on the cells' thread: no background loop was needed.
    assert "durable-nb-loop" not in wakeups
    assert wakeups == {name: 0 for name in wakeups}
