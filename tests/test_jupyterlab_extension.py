"""The JupyterLab extension in real JupyterLab and headless Chromium: cell states and the Durable panel.

Each durable cell's DOM node reads ``data-durable-state`` (committed, restored, running, paused,
failed, stale); the Durable panel (``#durable-nb-panel``) shows the notebook's run, its gates with
Approve / Reject, and follows decisions made elsewhere. The built front end is shown to JupyterLab
through a data folder on ``$JUPYTER_PATH`` (labkit); with no build and no Node, the tests skip.
docs/refresh-screenshots runs them with $DURABLE_NB_SCREENSHOTS set to the docs' build folder.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from browserkit import chromium, require_browser, screenshot_path
from labkit import jupyterlab
from test_browser import open_notebook, run_all, wait_for_run

import durable_nb as dnb

pytestmark = pytest.mark.slow

STATES = "window.jupyterapp.shell.currentWidget.content.widgets.map(c => c.node.dataset.durableState || null)"
# Each cell's outputs, without durable_nb's own notes (a restore adds one saying so).
OUTPUTS = (
    "window.jupyterapp.shell.currentWidget.content.widgets.map(c => c.model.type === 'code'"
    " ? JSON.stringify(c.model.outputs.toJSON().map(o => [o.output_type, o.text, o.data && o.data['text/plain']])"
    ".filter(o => !String(o[2] || '').startsWith('durable_nb:'))) : '')"
)
KERNEL_ID = "window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.id"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """JupyterLab with durable_nb's front end and server extension, on a store of its own."""
    require_browser("jupyterlab")
    folder = tmp_path_factory.mktemp("lab-extension")
    store = f"sqlite:///{folder}/.durable_nb/runs.db"
    with jupyterlab(folder, store, tmp_path_factory.getbasetemp() / "config") as server:
        yield server


@pytest.fixture(scope="module")
def browser(lab: dict[str, Any]) -> Iterator[Any]:
    with chromium() as browser:
        yield browser


def write_notebook(lab: dict[str, Any], name: str, run: str, cells: list[str]) -> str:
    """A notebook whose first cell loads durable_nb and attaches to ``run``; ids as JupyterLab gives them."""
    setup = f"%load_ext durable_nb\n%durable run {run} --store {lab['store']}"
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in [setup, *cells]])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, str(Path(lab["folder"]) / f"{name}.ipynb"))
    return f"{name}.ipynb"


def wait_states(page: Any, expected: list[str | None], what: str) -> None:
    """Wait until the cells read ``expected`` (None: no state); fail with what they read instead."""
    try:
        wanted = json.dumps(json.dumps(expected, separators=(",", ":")))
        page.wait_for_function(f"JSON.stringify({STATES}) === {wanted}", timeout=90_000)
    except Exception:  # noqa: BLE001 - report what the cells read
        raise AssertionError(f"{what}: the cells read {page.evaluate(STATES)}, not {expected}") from None


def badge(page: Any, index: int) -> str:
    return str(
        page.evaluate(
            "i => { const b = window.jupyterapp.shell.currentWidget.content.widgets[i].node"
            ".querySelector('.durable-nb-badge'); return b ? b.textContent : ''; }",
            index,
        )
    )


def start_run_all(page: Any) -> None:
    """Run All without waiting for it to end (a cell of the test waits for the test), and make sure it started."""
    page.evaluate(
        "(() => { const w = window.jupyterapp.shell.currentWidget; w.content.activeCellIndex = 0;"
        " window.__ran = w.content.widgets[0].model.executionCount; })()"
    )
    for _ in range(5):
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        try:
            page.wait_for_function(
                "window.jupyterapp.shell.currentWidget.content.widgets[0].model.executionCount > (window.__ran || 0)",
                timeout=15_000,
            )
            return
        except Exception:  # noqa: BLE001 - try again: the notebook was not ready for the command
            continue
    raise AssertionError("Run All never started")


def open_panel(page: Any) -> Any:
    page.evaluate("window.jupyterapp.shell.activateById('durable-nb-panel')")
    panel = page.locator("#durable-nb-panel")
    panel.wait_for(state="visible", timeout=30_000)
    return panel


def kill_kernel(page: Any, lab: dict[str, Any], run_id: str) -> None:
    """SIGKILL the notebook's kernel (its pid from its registry entry) and wait until JupyterLab restarted it."""
    kernel_id = page.evaluate(KERNEL_ID)
    entry = json.loads((Path(lab["runtime"]) / f"durable-nb-kernel-{kernel_id}.json").read_text())
    assert entry["run_id"] == run_id and entry["store"] == lab["store"]
    page.evaluate(
        "(() => { window.__statuses = [];"
        " window.jupyterapp.shell.currentWidget.sessionContext.statusChanged.connect("
        "(_, s) => window.__statuses.push(s)); })()"
    )
    os.kill(entry["pid"], signal.SIGKILL)
    page.wait_for_function(
        "window.__statuses.some(s => s === 'autorestarting' || s === 'restarting' || s === 'dead')"
        " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'",
        timeout=90_000,
    )
    # JupyterLab says the kernel restarted in a dialog: close it, as a person would.
    dialog = page.locator(".jp-Dialog button.jp-mod-accept")
    if dialog.count():
        dialog.first.click()


def test_cells_read_committed_then_restored_after_a_kill_then_stale_when_edited(
    browser: Any, lab: dict[str, Any]
) -> None:
    """Run All commits every %%durable cell; after SIGKILL and Run All they read restored with the same
    outputs; an edited cell reads stale (and goes back when the edit is undone); running it forks."""
    cells = [
        "%%durable load\nrows = list(range(5))\nprint(f'loaded {len(rows)} rows')",
        "%%durable total\ntotal = sum(rows)\nprint('total', total)",
        "%%durable report\nreport = f'{total} over {len(rows)} rows'\nreport",
    ]
    page = open_notebook(browser, lab, write_notebook(lab, "cells", "cells", cells))
    run_all(page)
    wait_states(page, [None, "committed", "committed", "committed"], "after Run All")
    assert badge(page, 1).startswith("committed · ") and "stored" in badge(page, 1), badge(page, 1)
    run_id = wait_for_run(lab["store"], "cells", "running")
    first = page.evaluate(OUTPUTS)
    assert "loaded 5 rows" in first[1] and "10 over 5 rows" in first[3], first
    page.locator(".jp-Notebook").first.screenshot(path=screenshot_path(Path(lab["folder"]), "jupyterlab-cells.png"))

    kill_kernel(page, lab, run_id)
    page.evaluate("window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs')")
    page.wait_for_function(f"{OUTPUTS}.every(o => o === '' || o === '[]')", timeout=30_000)
    run_all(page)
    wait_states(page, [None, "restored", "restored", "restored"], "after the kill and Run All")
    again = page.evaluate(OUTPUTS)
    assert [again[i] for i in (1, 2, 3)] == [first[i] for i in (1, 2, 3)]
    assert badge(page, 2).startswith("restored · from "), badge(page, 2)

    edited = "%%durable total\ntotal = sum(rows) * 2\nprint('total', total)"
    page.evaluate(
        f"window.jupyterapp.shell.currentWidget.content.widgets[2].model.sharedModel.setSource({json.dumps(edited)})"
    )
    wait_states(page, [None, "restored", "stale", "restored"], "after editing the total cell")
    page.locator(".jp-Notebook").first.screenshot(
        path=screenshot_path(Path(lab["folder"]), "jupyterlab-cells-stale.png")
    )
    page.evaluate(
        f"window.jupyterapp.shell.currentWidget.content.widgets[2].model.sharedModel.setSource({json.dumps(cells[1])})"
    )
    wait_states(page, [None, "restored", "restored", "restored"], "after undoing the edit")

    page.evaluate(
        f"window.jupyterapp.shell.currentWidget.content.widgets[2].model.sharedModel.setSource({json.dumps(edited)})"
    )
    wait_states(page, [None, "restored", "stale", "restored"], "after editing again")
    page.evaluate(
        "(() => { const w = window.jupyterapp.shell.currentWidget; w.content.activeCellIndex = 2;"
        " window.jupyterapp.commands.execute('notebook:run-cell'); })()"
    )
    wait_states(page, [None, "restored", "committed", "restored"], "after running the edited cell")
    runs = dnb.runs("cells", store=lab["store"])
    fork = runs[runs["run_id"] != run_id]
    assert len(fork) == 1 and fork["parent_run_id"].iloc[0] == run_id
    panel = open_panel(page)
    panel.locator(f"text=run {fork['run_id'].iloc[0]}").wait_for(timeout=30_000)
    # The fork tree names each run (a fork keeps its source's name), its id only in the tooltip.
    trees = panel.locator(".durable-nb-fork-button")
    trees.nth(1).wait_for(timeout=30_000)
    names = [trees.nth(i).locator(".durable-nb-fork-name").inner_text() for i in range(trees.count())]
    assert names == ["cells", "cells"], names
    assert run_id not in trees.first.inner_text() and run_id in (trees.first.get_attribute("title") or "")
    # The fork tree: clicking the original run switches the kernel back to it.
    panel.locator(f"[data-durable-run='{run_id}']").click()
    panel.locator(f"text=run {run_id}").wait_for(timeout=30_000)
    assert panel.locator(f"[data-durable-run='{fork['run_id'].iloc[0]}']").is_enabled()
    page.close()


def test_a_notebook_made_durable_by_one_line_shows_running_committed_restored_and_stale(
    browser: Any, lab: dict[str, Any]
) -> None:
    """`%durable run NAME --all` and no %%durable line: a cell reads running while it runs (first Run All
    included); killed in flight, Run All restores the cells before it with the same outputs and runs it
    again; after a kill when idle every cell reads restored; an edited cell reads stale, and running it forks."""
    folder = Path(lab["folder"])
    release = folder / "release-all"
    cells = [
        "rows = list(range(5))\nprint(f'loaded {len(rows)} rows')",
        "import pathlib, time\n"
        "while not pathlib.Path('release-all').exists():  # the test lets it finish\n"
        "    time.sleep(0.05)\n"
        "total = sum(rows)\nprint('total', total)",
        "report = f'{total} over {len(rows)} rows'\nreport",
    ]
    name = write_notebook(lab, "whole", "whole", cells).replace(".ipynb", "")
    path = folder / f"{name}.ipynb"
    text = path.read_text().replace("--store", "--all --store")
    path.write_text(text)
    page = open_notebook(browser, lab, f"{name}.ipynb")
    start_run_all(page)
    wait_states(page, [None, "committed", "running", None], "while the second cell runs")
    run_id = wait_for_run(lab["store"], "whole", "running")
    kill_kernel(page, lab, run_id)
    first = page.evaluate(OUTPUTS)
    release.write_text("go")
    page.evaluate("window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs')")
    page.wait_for_function(f"{OUTPUTS}.every(o => o === '' || o === '[]')", timeout=30_000)
    run_all(page)
    wait_states(page, [None, "restored", "committed", "committed"], "after the kill in flight and Run All")
    second = page.evaluate(OUTPUTS)
    assert second[1] == first[1] and "loaded 5 rows" in second[1], (first, second)
    assert "total 10" in second[2] and "10 over 5 rows" in second[3], second

    kill_kernel(page, lab, run_id)
    page.evaluate("window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs')")
    page.wait_for_function(f"{OUTPUTS}.every(o => o === '' || o === '[]')", timeout=30_000)
    run_all(page)
    wait_states(page, [None, "restored", "restored", "restored"], "after a kill when idle and Run All")
    assert page.evaluate(OUTPUTS)[1:] == second[1:]

    edited = "report = f'{total} in {len(rows)} rows'\nreport"
    page.evaluate(
        f"window.jupyterapp.shell.currentWidget.content.widgets[3].model.sharedModel.setSource({json.dumps(edited)})"
    )
    wait_states(page, [None, "restored", "restored", "stale"], "after editing the last cell")
    page.evaluate(
        "(() => { const w = window.jupyterapp.shell.currentWidget; w.content.activeCellIndex = 3;"
        " window.jupyterapp.commands.execute('notebook:run-cell'); })()"
    )
    wait_states(page, [None, "restored", "restored", "committed"], "after running the edited cell")
    assert "10 in 5 rows" in page.evaluate(OUTPUTS)[3]
    runs = dnb.runs("whole", store=lab["store"])
    assert len(runs) == 2 and set(runs["parent_run_id"].dropna()) == {run_id}
    page.close()


GATE_CELLS = [
    "%%durable load\nrows = list(range(3))\nprint('loaded', len(rows))",
    "%%durable review\nimport durable_nb as dnb\ndecision = dnb.gate('publish the numbers?', {'rows': len(rows)})\n"
    "print('approved' if decision.approved else 'rejected', decision.comment)",
    "%%durable publish\nprint('published' if decision.approved else 'not published', len(rows))",
    "%durable end",
]


def decide_in_the_panel(page: Any, lab: dict[str, Any], run: str, action: str, comment: str) -> str:
    """Run All up to the gate, then click ``action`` in the panel with ``comment``; return the run's id."""
    panel = open_panel(page)
    run_all(page)
    wait_states(page, [None, "committed", "paused", None, None], "at the gate")
    run_id = wait_for_run(lab["store"], run, "paused")
    gate = panel.locator(".durable-nb-gate")
    gate.wait_for(timeout=60_000)
    panel.locator(f"text=run {run_id}").wait_for(timeout=30_000)
    gate.locator(".durable-nb-comment").fill(comment)
    gate.locator(f"[data-durable-action='{action}']").click()
    return run_id


def test_approve_in_the_panel_completes_the_run(browser: Any, lab: dict[str, Any]) -> None:
    """Run All stops at the gate (paused); the panel shows it with its context; Approve there records the
    decision and continues the notebook from the gated cell: the run completes with no second Run All."""
    page = open_notebook(browser, lab, write_notebook(lab, "review", "review", GATE_CELLS))
    panel = open_panel(page)
    run_all(page)
    wait_states(page, [None, "committed", "paused", None, None], "at the gate")
    assert badge(page, 2) == "paused at gate · publish the numbers?"
    run_id = wait_for_run(lab["store"], "review", "paused")
    gate = panel.locator(".durable-nb-gate")
    gate.wait_for(timeout=60_000)
    assert "publish the numbers?" in gate.inner_text()
    assert '"rows": 3' in gate.locator(".durable-nb-gate-context").inner_text()
    panel.locator(f"text=run {run_id}").wait_for(timeout=30_000)
    gate.locator(".durable-nb-comment").fill("Numbers checked in the panel")
    page.screenshot(path=screenshot_path(Path(lab["folder"]), "jupyterlab-panel.png"))
    gate.locator("[data-durable-action='approve']").click()
    panel.locator("text=Approved the gate of cell 'review'").wait_for(timeout=60_000)
    assert wait_for_run(lab["store"], "review", "completed") == run_id
    wait_states(page, [None, "committed", "committed", "committed", None], "after Approve continued the notebook")
    outputs = page.evaluate(OUTPUTS)
    assert "approved Numbers checked in the panel" in outputs[2]
    assert "published 3" in outputs[3] and "not published" not in outputs[3]
    assert panel.locator("[data-durable-action='approve']").count() == 0
    assert panel.locator("[data-durable-action='run-all']").count() == 0
    history = dnb.history(run_id, store=lab["store"])
    assert {"approved:review", "after:publish"} <= set(history["step"])
    panel.locator(".durable-nb-status:text-is('completed')").wait_for(timeout=60_000)
    page.close()


def test_reject_in_the_panel_runs_the_gated_cell_again_with_the_rejection(browser: Any, lab: dict[str, Any]) -> None:
    """Reject in the panel records the decision and re-runs the gated cell, which sees the rejection and
    its comment; the cells below run as Run All would and the run ends as the notebook says."""
    page = open_notebook(browser, lab, write_notebook(lab, "refuse", "refuse", GATE_CELLS))
    run_id = decide_in_the_panel(page, lab, "refuse", "reject", "Numbers look wrong")
    page.locator("#durable-nb-panel >> text=Rejected the gate of cell 'review'").wait_for(timeout=60_000)
    assert wait_for_run(lab["store"], "refuse", "completed") == run_id
    wait_states(page, [None, "committed", "committed", "committed", None], "after Reject continued the notebook")
    outputs = page.evaluate(OUTPUTS)
    assert "rejected Numbers look wrong" in outputs[2]
    assert "not published 3" in outputs[3]
    page.close()


def test_a_decision_from_the_command_line_shows_in_the_panel_without_a_reload(
    browser: Any, lab: dict[str, Any]
) -> None:
    """The panel follows the run: `durable-nb approve` in another process removes the gate from it."""
    page = open_notebook(browser, lab, write_notebook(lab, "elsewhere", "elsewhere", GATE_CELLS))
    panel = open_panel(page)
    run_all(page)
    wait_states(page, [None, "committed", "paused", None, None], "at the gate")
    run_id = wait_for_run(lab["store"], "elsewhere", "paused")
    panel.locator("[data-durable-action='approve']").wait_for(timeout=60_000)
    page.evaluate("window.__notReloaded = true")
    done = subprocess.run(
        [sys.executable, "-m", "durable_nb.cli", "approve", run_id, "--store", lab["store"], "--by", "cli"],
        env=lab["env"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    panel.locator("[data-durable-action='approve']").wait_for(state="detached", timeout=60_000)
    assert page.evaluate("window.__notReloaded") is True
    # Only a click in this browser's panel runs cells: the gated cell still waits for a Run All.
    assert page.evaluate(STATES)[2] == "paused"
    assert page.evaluate("window.jupyterapp.shell.currentWidget.content.widgets[3].model.executionCount") is None
    assert panel.locator("[data-durable-action='run-all']").count() == 0
    assert panel.locator(".durable-nb-status").inner_text() != "paused"
    page.close()


def test_the_panel_says_what_to_do_for_a_notebook_without_a_run(browser: Any, lab: dict[str, Any]) -> None:
    """A notebook whose kernel never attached shows how to start, and no cell carries a state."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, str(Path(lab["folder"]) / "plain.ipynb"))
    page = open_notebook(browser, lab, "plain.ipynb")
    panel = open_panel(page)
    panel.locator("text=%durable run NAME").wait_for(timeout=30_000)
    run_all(page)
    page.wait_for_function("window.jupyterapp.shell.currentWidget.content.widgets[0].model.executionCount === 1")
    assert page.evaluate(STATES) == [None]
    page.close()


def test_the_panel_opens_the_cells_of_the_run_and_its_forks_side_by_side(browser: Any, lab: dict[str, Any]) -> None:
    """Once the run has a fork (a replay), the panel's fork tree offers Compare cells: the server's page,
    in a tab of its own, shows the run's and the fork's cells side by side."""
    cells = ["%%durable param\nalpha = 0.1", "%%durable fit\nprint('coef', alpha * 10)"]
    page = open_notebook(browser, lab, write_notebook(lab, "whatif", "whatif", cells))
    panel = open_panel(page)
    run_all(page)
    wait_states(page, [None, "committed", "committed"], "after Run All")
    run_id = wait_for_run(lab["store"], "whatif", "running")
    assert panel.locator("[data-durable-action='compare-cells']").count() == 0  # no fork yet: nothing to compare
    fork = dnb.fork(run_id, state={"alpha": 1.0}, store=lab["store"]).id
    link = panel.locator("[data-durable-action='compare-cells']")
    link.wait_for(timeout=60_000)
    with page.context.expect_page() as opened:
        link.click()
    compared = opened.value
    compared.wait_for_load_state()
    assert compared.locator(f"th[data-run='{run_id}']").count() == 1
    assert compared.locator(f"th[data-run='{fork}']").count() == 1
    assert "coef 1.0" in compared.locator("tr[data-cell='fit']").inner_text()
    compared.close()
    page.close()


def test_a_gate_waiting_in_a_replays_fork_is_decided_in_the_panel(browser: Any, lab: dict[str, Any]) -> None:
    """A replay's fork paused at a gate shows in the panel of the notebook it replays, with the fork and its
    values, beside the replay's progress and a link to compare; Approve there records the decision on the
    fork and runs nothing in the notebook."""
    from durable_nb.engine.cells.replay_runs import start_replay

    gated = (
        "%%durable review\nimport durable_nb as dnb\n"
        "d = dnb.gate('publish at this rate?', {'rate': rate}) if rate > 1 else None\nok = d is None or d.approved"
    )
    cells = ["%%durable base\nrate = 0.5", gated, "%%durable publish\npublished = rate if ok else None"]
    page = open_notebook(browser, lab, write_notebook(lab, "replayed", "replayed", cells))
    panel = open_panel(page)
    run_all(page)
    wait_states(page, [None, "committed", "committed", "committed"], "after Run All")
    run_id = wait_for_run(lab["store"], "replayed", "running")
    counts = "window.jupyterapp.shell.currentWidget.content.widgets.map(c => c.model.executionCount)"
    ran = page.evaluate(counts)
    started = start_replay(lab["store"], run_id, "review", {"rate": 2.0})
    assert started.worker is not None
    started.worker.wait(timeout=120)  # paused, and nothing left replaying it: the decision continues nothing
    [fork] = started.runs()
    assert fork.status == "paused"
    gate = panel.locator(f".durable-nb-fork-gate[data-durable-run='{fork.id}']")
    gate.wait_for(timeout=60_000)
    # Shown as JavaScript writes numbers: 2.0 reads 2.
    assert "publish at this rate?" in gate.inner_text() and "rate=2" in gate.inner_text()
    assert '"rate": 2' in gate.locator(".durable-nb-gate-context").inner_text()
    replay = panel.locator(f".durable-nb-replay[data-durable-run='{fork.id}']")
    assert replay.get_attribute("data-durable-progress") == "0/2"
    assert panel.locator("[data-durable-action='compare-replays']").count() == 1
    # The notebook's own run waits at no gate.
    assert panel.locator(".durable-nb-gates [data-durable-action='approve']").count() == 0
    gate.locator(".durable-nb-comment").fill("2.0 is fine")
    gate.locator("[data-durable-action='approve']").click()
    panel.locator(f"text=Approved the gate of cell 'review' in fork {fork.id}").wait_for(timeout=60_000)
    gate.wait_for(state="detached", timeout=60_000)
    decided = dnb.get_run(fork.id, store=lab["store"])
    assert decided.status == "pending"
    approved = [c for c in dnb.history(fork.id, store=lab["store"])["step"] if str(c).startswith("approved:")]
    assert approved == ["approved:review"]
    assert dnb.get_run(run_id, store=lab["store"]).status == "running"  # the notebook's run is untouched
    assert page.evaluate(counts) == ran  # and no cell of the notebook ran again
    assert panel.locator("[data-durable-action='run-all']").count() == 0
    page.close()
