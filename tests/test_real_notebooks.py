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


def test_a_gallery_notebook_replays_from_a_cell(sources: dict[str, str], tmp_path: Path) -> None:
    """A gallery example replayed from its third cell, the number of labelled samples swept over three
    values (the original 40, then 100 and 200): the cells above are restored in each fork, never run
    there; the fork with the original value shows the original's report and figures cell for cell,
    the others differ in them; the user's kernel keeps its own values throughout."""
    import numpy as np
    from kernelkit import Kernel

    import durable_nb as dnb

    path = "semi_supervised/plot_label_propagation_digits.py"
    store = f"sqlite:///{tmp_path}/runs.db"
    # The inline backend, as in the replays' kernels: figures are outputs to compare.
    kernel = Kernel(tmp_path, env={"DURABLE_NB_STORE": store})
    try:
        for source in realnb.durable_cells("gallery", realnb.split_cells(sources[path])):
            assert kernel.run(source, timeout=300).status == "ok", source[:80]
        [original] = list(dnb.runs("gallery", store=store)["run_id"])
        swept = [np.arange(n, 340) for n in (40, 100, 200)]
        forks = dnb.replay(at="c3", sweep={"unlabeled_set": swept}, run=original, store=store, wait=True)
        shown = kernel.run("print(len(unlabeled_set), len(predicted_labels))", timeout=60)
        assert shown.text.split() == ["300", "300"]  # the user's kernel is where it was
    finally:
        kernel.close()
    assert [fork.status for fork in forks] == ["completed"] * 3
    for fork in forks:
        steps = [step for step in dnb.history(fork.id, store=store)["step"] if step.startswith("after:")]
        assert steps == [f"after:c{i}" for i in range(3, 10)]  # c1 and c2 restored, the rest run
    before = dnb.get_run(original, store=store).state
    kept = forks[0].state
    for name in ("y_train", "predicted_labels", "true_labels", "uncertainty_index"):
        assert np.array_equal(kept[name], before[name]), name
    assert [len(fork.state["predicted_labels"]) for fork in forks] == [300, 240, 140]
    # What each cell showed: the classification report (c5), the confusion matrix (c6), the digits (c9).
    table = dnb.compare_cells([original, *forks], store=store)
    digests = table.pivot(index="cell", columns="run_id", values="output_digest")
    images = table.set_index(["cell", "run_id"])["outputs"]
    assert any("image/png" in output.get("data", {}) for output in images[("c9", original)])
    for cell in ("c5", "c6", "c9"):
        assert digests.loc[cell, forks[0].id] == digests.loc[cell, original], cell
        assert digests.loc[cell, forks[1].id] != digests.loc[cell, original], cell
        assert digests.loc[cell, forks[2].id] not in (digests.loc[cell, original], digests.loc[cell, forks[1].id])
