"""What durable_nb adds to each kind of cell, measured inside real kernels.

``python -m benchmarks.overhead [--reps N] [--against PATH] [--json PATH]``

One notebook (imports, data, a 9-subplot figure, a cell reading it, a fitted model, a forest,
cells scoring them, cells that change nothing) runs in fresh ipykernel kernels, plain and
durable (``%load_ext`` and ``%durable run`` as two cells of their own), interleaved. Each cell is
timed inside the kernel, from IPython's ``pre_run_cell`` to ``post_run_cell`` event, in wall and
CPU time (CPU time of the kernel process: it is less disturbed by other work on the machine).
With ``--against PATH`` a second copy of durable_nb (``PATH`` holding a ``durable_nb`` folder,
say an older commit's) runs durable too, interleaved with the others, for before/after ratios.
Each copy's modules are byte-compiled first, as an installed package's are.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from .realnb import Kernel, compile_package

CELLS = [
    (
        "imports",
        "import numpy as np\nimport matplotlib.pyplot as plt\nfrom sklearn.datasets import make_classification"
        "\nfrom sklearn.ensemble import RandomForestClassifier\nfrom sklearn.linear_model import LogisticRegression",
    ),
    ("data", "X, y = make_classification(n_samples=2000, n_features=20, random_state=0)"),
    (
        "figure 3x3",
        "fig, axs = plt.subplots(3, 3, figsize=(9, 9))\nfor i, ax in enumerate(axs.flat):\n"
        "    ax.scatter(X[:, i], X[:, i + 1], c=y, s=4)\n    ax.set_title(f'f{i}')",
    ),
    ("reads figure", "size = fig.get_size_inches()"),
    ("fit model", "model = LogisticRegression(max_iter=500).fit(X, y)"),
    ("fit forest", "forest = RandomForestClassifier(n_estimators=50, random_state=0).fit(X, y)"),
    ("uses models", "score = model.score(X, y) + forest.score(X, y)"),
    ("no change 1", "pass"),
    ("no change 2", "z = 1"),
    ("no change 3", "w = 2"),
]
# Registered by the first cell: each later cell's start and end, in the kernel, without a user variable.
_TIMER = r"""
(lambda sys, time: (
  sys.modules.setdefault('_overhead', type(sys)('_overhead')),
  setattr(sys.modules['_overhead'], 'times', []),
  get_ipython().events.register('pre_run_cell', lambda info: sys.modules['_overhead'].times.append(
      ('start', time.perf_counter(), time.process_time()))),
  get_ipython().events.register('post_run_cell', lambda result: sys.modules['_overhead'].times.append(
      ('end', time.perf_counter(), time.process_time()))),
))(__import__('sys'), __import__('time'));
"""
_REPORT = "print('OVERHEAD', __import__('json').dumps(__import__('sys').modules['_overhead'].times))"


def cells_of(mode: str) -> list[tuple[str, str]]:
    """The notebook's cells in one mode: plain, or durable (two set-up cells, then ``%%durable`` cells)."""
    if mode == "plain":
        return CELLS
    setup = [("load_ext", "%load_ext durable_nb"), ("attach", "%durable run overhead")]
    return setup + [(label, f"%%durable c{i}\n{code}") for i, (label, code) in enumerate(CELLS)]


def run(mode: str, pythonpath: str | None) -> dict[str, tuple[float, float]]:
    """Run the notebook in a fresh kernel; each cell's (wall, cpu) seconds by label."""
    folder = Path(tempfile.mkdtemp(prefix="durable-nb-overhead-"))
    env = dict(os.environ)
    env.pop("MPLBACKEND", None)  # ipykernel's default: the inline backend
    env["DURABLE_NB_STORE"] = f"sqlite:///{folder}/runs.db"
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    kernel = Kernel(folder, env)
    try:
        kernel.execute(_TIMER)
        cells = cells_of(mode)
        for label, code in cells:
            result = kernel.execute(code)
            if result.status != "ok":
                raise RuntimeError(f"{mode}: cell {label!r} failed: {result.error}")
        text = kernel.execute(_REPORT).text
    finally:
        kernel.close()
    times = json.loads(text.split("OVERHEAD ", 1)[1])
    starts = [t[1:] for t in times if t[0] == "start"]
    ends = [t[1:] for t in times if t[0] == "end"][1:]  # the timer cell's own end comes first
    return {
        label: (end[0] - start[0], end[1] - start[1])
        for (label, _), start, end in zip(cells, starts, ends, strict=False)
    }


def overhead_scenario(reps: int, against: str | None = None) -> dict[str, Any]:
    """Interleaved runs (plain, durable, [durable against]) and each cell's medians."""
    modes = {"plain": None, "durable": str(Path(__file__).resolve().parent.parent)}
    if against is not None:
        modes["against"] = against
    for path in modes.values():
        if path is not None:
            compile_package(Path(path) / "durable_nb")
    runs: dict[str, list[dict[str, tuple[float, float]]]] = {mode: [] for mode in modes}
    for rep in range(reps):
        for mode, path in modes.items():
            runs[mode].append(run("plain" if mode == "plain" else "durable", path))
            print(f"  rep {rep + 1}: {mode} done", file=sys.stderr, flush=True)
    labels = ["load_ext", "attach", *(label for label, _ in CELLS)]
    table = {}
    for label in labels:
        row = {}
        for mode in modes:
            found = [r[label] for r in runs[mode] if label in r]
            if found:
                row[mode] = {
                    "wall_ms": round(statistics.median(w for w, _ in found) * 1000, 2),
                    "cpu_ms": round(statistics.median(c for _, c in found) * 1000, 2),
                }
        table[label] = row
    return {"reps": reps, "against": against, "cells": table}


def render(result: dict[str, Any]) -> str:
    """The medians as a Markdown table: per cell, each mode's CPU and wall milliseconds."""
    modes = [m for m in ("plain", "durable", "against") if any(m in row for row in result["cells"].values())]
    head = " | ".join(f"{m} cpu ms | {m} wall ms" for m in modes)
    lines = [f"| cell | {head} |", "|---|" + "---:|" * (2 * len(modes))]
    for label, row in result["cells"].items():
        cols = " | ".join(f"{row[m]['cpu_ms']:.1f} | {row[m]['wall_ms']:.1f}" if m in row else " | " for m in modes)
        lines.append(f"| {label} | {cols} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the overhead scenario, print its table and write the results as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="interleaved runs per mode")
    parser.add_argument("--against", default=None, help="a folder holding another durable_nb, to compare with")
    parser.add_argument("--json", default="benchmarks/overhead.json", help="where to write the results")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error("--reps takes a whole number >= 1")
    result = overhead_scenario(args.reps, args.against)
    print(render(result))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
