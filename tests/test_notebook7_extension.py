"""The front-end extension in Notebook 7 (the ``notebook`` package): durable cells show their state there too.

Notebook 7 loads the same prebuilt extensions as JupyterLab (labkit shows it the build the same way);
a notebook made durable by one line reads ``data-durable-state`` on its cells' DOM nodes after Run All,
and restored after its kernel restarts and Run All again. Skips without Notebook 7, Chromium, Playwright
or a build of the front end.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from browserkit import chromium, require_browser
from labkit import jupyterlab
from test_browser import run_all

pytestmark = pytest.mark.slow

# Each cell's state from the page's DOM, as a theme or another tool would read it.
STATES = "[...document.querySelectorAll('.jp-Notebook .jp-Cell')].map(c => c.dataset.durableState || null)"


@pytest.fixture(scope="module")
def notebook7(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Notebook 7 with durable_nb's front end and server extension, on a store of its own."""
    require_browser()
    notebook = pytest.importorskip("notebook", reason="this test needs Notebook 7 (pip install 'notebook>=7')")
    if int(notebook.__version__.split(".")[0]) < 7:
        pytest.skip(f"this test needs Notebook 7, not {notebook.__version__} (pip install 'notebook>=7')")
    folder = tmp_path_factory.mktemp("notebook7")
    store = f"sqlite:///{folder}/.durable_nb/runs.db"
    with jupyterlab(folder, store, tmp_path_factory.getbasetemp() / "config", app="notebook") as server:
        yield server


def wait_states(page: Any, expected: list[str | None], what: str) -> None:
    """Wait until the cells' DOM nodes read ``expected`` (None: no state); fail with what they read instead."""
    wanted = json.dumps(json.dumps(expected, separators=(",", ":")))
    try:
        page.wait_for_function(f"JSON.stringify({STATES}) === {wanted}", timeout=90_000)
    except Exception:  # noqa: BLE001 - report what the cells read
        raise AssertionError(f"{what}: the cells read {page.evaluate(STATES)}, not {expected}") from None


def test_a_notebook_in_notebook_7_shows_each_durable_cell_state(notebook7: dict[str, Any]) -> None:
    """`%load_ext durable_nb` and `%durable run demo --all`: Run All in Notebook 7 marks each later cell
    committed; after the kernel restarts, Run All marks them restored."""
    cells = [
        f"%load_ext durable_nb\n%durable run demo --all --store {notebook7['store']}",
        "rows = list(range(5))\nprint(f'loaded {len(rows)} rows')",
        "total = sum(rows)\ntotal",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, str(Path(notebook7["folder"]) / "demo.ipynb"))
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(f"{notebook7['base']}/notebooks/demo.ipynb?token={notebook7['token']}")
        idle = (
            "(() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
            " return w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel"
            " && w.sessionContext.session.kernel.status === 'idle'; })()"
        )
        page.wait_for_function(idle, timeout=90_000)
        run_all(page)
        wait_states(page, [None, "committed", "committed"], "after Run All in Notebook 7")
        page.evaluate("window.jupyterapp.shell.currentWidget.sessionContext.restartKernel()")
        page.wait_for_function(
            "window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'", timeout=90_000
        )
        run_all(page)
        wait_states(page, [None, "restored", "restored"], "after a kernel restart and Run All in Notebook 7")
        page.close()
