"""Notebook costs: committing and restoring a cell that defines a 100 MB DataFrame, against the
floor of pickling it and writing the bytes once (and reading and unpickling them)."""

from __future__ import annotations

import os
import pickle
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

# The cell binds a frame made before the timer starts, so its time is durable_nb's alone:
# pickling, hashing, writing and committing the value (a new one each time: nothing is reused).
CELL = "%%durable make --rerun\nframe = NEXT_FRAME\n"


def _shell(store: str) -> Any:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell()
    shell.run_line_magic("load_ext", "durable_nb")
    shell.run_cell("import numpy as np, pandas as pd")
    shell.run_line_magic("durable", f"run bench-notebook --store {store}")
    return shell


def dataframe_scenario(rows: int, reps: int) -> dict[str, Any]:
    """Time commit and restore of a DataFrame cell, and the pickle-and-write floor, interleaved."""
    import numpy as np
    import pandas as pd

    folder = Path(tempfile.mkdtemp(prefix="durable-nb-notebook-"))
    store = f"sqlite:///{folder}/notebook.db"
    size = rows * 10 * 8  # float64 cells
    shell = _shell(store)
    times: dict[str, list[float]] = {"commit": [], "restore": [], "floor write": [], "floor read": []}
    for rep in range(reps):
        frame = pd.DataFrame(np.random.default_rng(rep).random((rows, 10)))
        shell.user_ns["NEXT_FRAME"] = frame
        started = time.perf_counter()
        assert shell.run_cell(CELL).success
        times["commit"].append(time.perf_counter() - started)

        restorer = _shell(store)  # a new kernel: the cell restores instead of running
        started = time.perf_counter()
        assert restorer.run_cell(CELL.replace(" --rerun", "")).success
        times["restore"].append(time.perf_counter() - started)
        assert restorer.user_ns["frame"].equals(frame)
        del restorer

        path = folder / "floor.pickle"
        started = time.perf_counter()
        data = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
        with open(path, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        times["floor write"].append(time.perf_counter() - started)
        started = time.perf_counter()
        pickle.loads(path.read_bytes())
        times["floor read"].append(time.perf_counter() - started)
    median = {name: statistics.median(values) for name, values in times.items()}
    return {
        "scenario": f"A cell defining a {size / 1e6:.0f} MB DataFrame",
        "commit_s": round(median["commit"], 3),
        "floor_write_s": round(median["floor write"], 3),
        "commit_vs_floor": round(median["commit"] / median["floor write"], 2),
        "restore_s": round(median["restore"], 3),
        "floor_read_s": round(median["floor read"], 3),
        "restore_vs_floor": round(median["restore"] / median["floor read"], 2),
    }


def render_dataframe(result: dict[str, Any]) -> str:
    """Format the DataFrame scenario as a Markdown table."""
    return "\n".join(
        [
            f"**{result['scenario']}** (medians)",
            "",
            "| step | durable_nb | floor | x floor |",
            "|---|---:|---:|---:|",
            f"| commit (floor: pickle + write + fsync) | {result['commit_s']:.3f} s | {result['floor_write_s']:.3f} s"
            f" | {result['commit_vs_floor']:.2f} |",
            f"| restore in a new kernel (floor: read + unpickle) | {result['restore_s']:.3f} s"
            f" | {result['floor_read_s']:.3f} s | {result['restore_vs_floor']:.2f} |",
        ]
    )


def run_all_scenario(cells: int) -> dict[str, Any]:
    """Run All of a notebook of durable cells, then Run All again in a new kernel: time per restored cell."""
    from durable_nb.demo.run import _Kernel

    folder = Path(tempfile.mkdtemp(prefix="durable-nb-runall-"))
    env = dict(os.environ)
    env["DURABLE_NB_STORE"] = f"sqlite:///{folder}/runs.db"
    sources = ["%load_ext durable_nb\n%durable run run-all"] + [
        f"%%durable c{i}\nvalue_{i} = list(range({i} * 100))\nlen(value_{i})" for i in range(cells)
    ]

    def run_all(kernel: Any) -> float:
        kernel.run(sources[0])
        started = time.perf_counter()
        for source in sources[1:]:
            status, _ = kernel.run(source)
            assert status == "ok", source
        return time.perf_counter() - started

    first = _Kernel(folder, env)
    executed = run_all(first)
    first.kill()
    first.close()
    second = _Kernel(folder, env)
    restored = run_all(second)
    second.close()
    return {
        "scenario": f"Run All of {cells} durable cells",
        "executed_ms_per_cell": round(executed / cells * 1000, 2),
        "restored_ms_per_cell": round(restored / cells * 1000, 2),
    }


def render_run_all(result: dict[str, Any]) -> str:
    """Format the Run All scenario as a line."""
    return (
        f"**{result['scenario']}**: executing and committing {result['executed_ms_per_cell']:.1f} ms per cell; "
        f"after a kernel restart, restoring {result['restored_ms_per_cell']:.1f} ms per cell"
    )
