"""Issue 18 item 7: ``durable-nb run-notebook`` killed with its kernel at random cells, then run again.

Each kill is SIGKILL to the CLI's process group and to the kernel's: jupyter_client starts the
kernel in a session of its own, so the CLI's group alone would leave the kernel alive until its
parent poller notices (about a second), long enough to commit the cell in flight. The kill points
come from a seeded ``random.Random`` and are reached without timing: the cell to stop in waits on
a hold file, before or after its side effect, and the test kills once the kernel says it is
there. The same command then runs again, killed at a later point or left to finish. Each cell
appends its name to ``effects.log`` whenever its body runs, so the test knows exactly which cells
ran in each attempt: every committed cell is restored, and only a cell killed after its effect
runs again (once). The finished output notebook must equal an uninterrupted run's, and the whole
round is one run in the store, completed.
"""

from __future__ import annotations

import random
import shutil
from collections import Counter
from pathlib import Path

import nbformat
import pytest
from notebookkit import comparable, kill_when_reached, run_here, run_notebook_command, write_notebook

import durable_nb as dnb

# run-notebook on SQLite: its PostgreSQL case is in test_run_notebook.py, the store's in the conformance tests.
pytestmark = [pytest.mark.slow, pytest.mark.backends("sqlite")]

# The suite kills 6 times (two rounds); tests/stress/run_notebook_kill_soak.py runs the same check with more
# kills (20 in five or so rounds, as CI once did).
KILLS = 6
SEED = 18_07
PARAMETERS = ("-p", "seed", "4", "-p", "scale", "0.5", "-p", "label", "it's")

# The module every cell imports by name (the kernel runs in the notebook's folder, on sys.path).
SIDE_EFFECTS = '''
import os, time


def _hold(when, name):
    flag = f"hold-{when}-{name}"
    if os.path.exists(flag):
        with open(flag + ".reached", "w") as reached:
            reached.write(str(os.getpid()))
        while True:  # until the test kills this kernel
            time.sleep(0.05)


def mark(name):
    """Append the cell's name to effects.log (one line a body run), stopping where the test holds it."""
    _hold("before", name)
    fd = os.open("effects.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (name + "\\n").encode())
    finally:
        os.close(fd)
    _hold("after", name)
'''

# (effect name, source, tags): tagged cells are named by their tag, the rest by position and digest.
CELLS = [
    ("load", "rows = [seed * i for i in range(8)]", ["load"]),
    ("scale", "scaled = [row * scale for row in rows]", []),
    ("show", "print('label', label, 'total', sum(scaled))\nprint('rows', rows)", []),
    ("table", "import pandas as pd\n\nframe = pd.DataFrame({'row': rows, 'scaled': scaled})\nframe.head(3)", ["table"]),
    ("html", "from IPython.display import HTML, display\n\ndisplay(HTML(f'<b>{label}</b>: {len(frame)} rows'))", []),
    ("stats", "mean = frame.scaled.mean()\nspread = frame.scaled.max() - frame.scaled.min()", []),
    ("summary", "print('mean', mean)\n{'label': label, 'mean': float(mean), 'spread': float(spread)}", []),
]
EFFECTS = [name for name, _, _ in CELLS]
FIRST = 3  # the first effect cell's index in the output: after the title, the parameters and the injected cell
POINTS = [(name, when) for name in EFFECTS for when in ("before", "after")]


def _notebook(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "sidefx.py").write_text(SIDE_EFFECTS)
    cells = [
        nbformat.v4.new_markdown_cell("# Killed and run again"),
        nbformat.v4.new_code_cell("seed = 3\nscale = 2.5\nlabel = 'base'", metadata={"tags": ["parameters"]}),
    ]
    for name, source, tags in CELLS:
        marked = f"__import__('sidefx').mark({name!r})\n{source}"
        cells.append(nbformat.v4.new_code_cell(marked, metadata={"tags": tags}))
    return write_notebook(folder / "kills.ipynb", cells)


def _copy(reference: Path, folder: Path) -> None:
    """The same notebook (cell ids included) and module in another folder: another path, so another run."""
    folder.mkdir()
    for name in ("kills.ipynb", "sidefx.py"):
        shutil.copy(reference / name, folder / name)


def _command(store_url: str) -> list[str]:
    return run_notebook_command("kills.ipynb", "-o", "out.ipynb", *PARAMETERS, "--store", store_url)


def _effects(folder: Path) -> list[str]:
    path = folder / "effects.log"
    return path.read_text().split() if path.exists() else []


def _plan(rng: random.Random, kills: int) -> list[list[tuple[str, str]]]:
    """Rounds of kill points, each round's points in notebook order (the rerun must reach the next one)."""
    rounds: list[list[tuple[str, str]]] = []
    while kills:
        count = min(kills, rng.randint(2, 5))
        rounds.append([POINTS[i] for i in sorted(rng.sample(range(len(POINTS)), count))])
        kills -= count
    return rounds


def _kill_at(folder: Path, store_url: str, cell: str, when: str) -> None:
    """Run the command until the kernel holds at ``cell`` (``when`` its effect), then SIGKILL CLI and kernel."""
    hold = folder / f"hold-{when}-{cell}"
    reached = folder / f"hold-{when}-{cell}.reached"
    hold.touch()
    kill_when_reached(_command(store_url), folder, reached, f"{when} {cell}")
    hold.unlink()
    reached.unlink()


def _the_run(store_url: str, others: set[str]) -> str:
    """The one run of this round's notebook: the only run not in ``others``."""
    new = set(dnb.runs("kills", store=store_url).run_id) - others
    assert len(new) == 1, f"one run per notebook and parameters, found {sorted(new)}"
    return new.pop()


# Each kill and rerun starts a kernel: on a loaded machine that can take more than the suite's 300 s per test.
@pytest.mark.timeout(1200)
def test_killed_at_random_cells_the_rerun_finishes_as_if_never_killed(tmp_path: Path, store_url: str) -> None:
    """Issue 18 item 7: kills of run-notebook and its kernel; reruns restore what committed and end alike."""
    kill_and_rerun(tmp_path, store_url, random.Random(SEED), KILLS)


def kill_and_rerun(tmp_path: Path, store_url: str, rng: random.Random, kill_count: int) -> None:
    """Kill run-notebook ``kill_count`` times at points ``rng`` draws, rerun each round to the end, check."""
    reference = tmp_path / "reference"
    _notebook(reference)
    plain = run_here(_command(store_url), reference)
    assert plain.returncode == 0, plain.stdout + plain.stderr[-3000:]
    assert _effects(reference) == EFFECTS
    expected = comparable(reference / "out.ipynb")
    others = {_the_run(store_url, set())}

    kills, repeated, finished, partial = 0, Counter[str](), [], []
    for number, points in enumerate(_plan(rng, kill_count)):
        folder = tmp_path / f"round-{number:02d}"
        _copy(reference, folder)
        start_at, run_id = 0, None
        for cell, when in points:
            where = f"round {number}, killed {when} {cell}"
            seen = len(_effects(folder))
            _kill_at(folder, store_url, cell, when)
            kills += 1
            # This attempt ran the cells from where the last one stopped to the one it was killed in:
            # committed cells were restored; the cell killed after its effect ran again.
            stop = EFFECTS.index(cell) + (when == "after")
            assert _effects(folder)[seen:] == EFFECTS[start_at:stop], where
            repeated.update([cell] if when == "after" else [])
            # Written as cells finish: each cell before the killed one as in the uninterrupted run, none after.
            written = comparable(folder / "out.ipynb")["cells"]
            finished_cells = FIRST + EFFECTS.index(cell)
            assert not any(c.get("outputs") for c in written[finished_cells:]), where
            partial.append((where, written[:finished_cells], expected["cells"][:finished_cells]))
            start_at = EFFECTS.index(cell)
            run_id = run_id or _the_run(store_url, others)
            assert _the_run(store_url, others) == run_id, where  # a rerun attaches to the same run
        seen = len(_effects(folder))
        done = run_here(_command(store_url), folder)
        assert done.returncode == 0, done.stdout + done.stderr[-3000:]
        assert _effects(folder)[seen:] == EFFECTS[start_at:]
        # Once a cell, and once more only where a kill landed after the cell's effect, before its commit.
        again = Counter(cell for cell, when in points if when == "after")
        assert Counter(_effects(folder)) == Counter(EFFECTS) + again
        assert _the_run(store_url, others) == run_id
        others.add(run_id)
        finished.append((run_id, comparable(folder / "out.ipynb")))

    assert kills == kill_count
    print(f"\n{kills} kills in {len(finished)} rounds; cells run again (killed after their effect): {dict(repeated)}")
    for where, written, cells in partial:
        assert written == cells, f"the output notebook when {where}"
    for run_id, notebook in finished:
        assert notebook == expected, f"the output of run {run_id}"
    statuses = {run_id: dnb.get_run(run_id, store=store_url).status for run_id in others}
    assert set(statuses.values()) == {"completed"}, statuses
