"""Real notebooks nobody here wrote, end to end with a kill: scikit-learn gallery examples.

The examples come from the scikit-learn source archive on the package index (fetched once and
cached, as the ``realnb`` benchmark does), split into cells at ``# %%``. Each runs plain, then
durable (every cell ``%%durable``), then restored in a new kernel, then killed with SIGKILL in a
middle cell and run again; every variable (arrays, frames, fitted estimators' attributes) and
every image of every cell must match the plain run, and the restored run the one it restores.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import realnb

pytestmark = [pytest.mark.slow, pytest.mark.sqlite_only]

# Two examples whose results do not vary between runs (no timings in their titles or values).
NOTEBOOKS = ["model_selection/plot_roc.py", "semi_supervised/plot_label_propagation_digits.py"]


@pytest.fixture(scope="module")
def sources() -> dict[str, str]:
    from importlib.metadata import version

    archive = realnb.fetch_sdist("scikit-learn", version("scikit-learn"))
    return realnb.read_examples(archive, NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS)
def test_a_gallery_notebook_is_faithful_after_restore_and_after_a_kill(
    path: str, sources: dict[str, str], tmp_path: Path
) -> None:
    """Restore-all and kill + Run All give back the plain run's session."""
    # The import cells' own timing run is the benchmark's; nothing here checks it.
    result = realnb.measure_notebook(path, sources[path], reps=1, work=tmp_path, time_imports=False)
    cells = result["cells"]
    assert result["plain"]["stopped"] is None and result["durable"]["stopped"] is None
    faithful = result["faithful"]
    for mode in ("durable", "restore_all", "restore_all_vs_its_run", "kill_rerun"):
        assert faithful[mode]["faithful"], (mode, faithful[mode])
    assert result["restore_all"]["restored_per_run"] == cells  # every cell restored, none executed
    kill = result["kill"]
    assert kill["committed_before_rerun"] is not None
    assert kill["restored"] == kill["committed_before_rerun"]  # what committed is restored, nothing else
    assert 0 < len(kill["restored"]) < cells
