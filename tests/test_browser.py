"""JupyterLab in headless Chromium: Run All, the gate panel, Approve, the inspector, a fork.

Needs Debian's chromium, Playwright for Python and JupyterLab; `.ci/run` installs them. These tests
take the screenshots in docs/ (shown in the README) into their temporary folder; docs/refresh-screenshots
runs them with $DURABLE_NB_SCREENSHOTS set to the docs' build folder, where the docs build takes them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from browserkit import chromium, require_browser, screenshot_path

import durable_nb as dnb

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A JupyterLab server on 127.0.0.1 with a token, serving copies of the notebooks."""
    require_browser("jupyterlab")
    folder = tmp_path_factory.mktemp("lab")
    for name in ("quickstart.ipynb", "counterfactuals.ipynb"):
        shutil.copy(ROOT / "notebooks" / name, folder / name)
    store = f"sqlite:///{folder}/.durable_nb/runs.db"
    port, token = _free_port(), uuid.uuid4().hex
    settings = folder / ".jupyter" / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    # No news prompt: it would cover the widgets in the screenshots.
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    env = dict(os.environ)
    env["DURABLE_NB_STORE"] = store
    # The key file the tests' own processes use (conftest's _isolated), so values read both ways.
    env["XDG_CONFIG_HOME"] = str(tmp_path_factory.getbasetemp() / "config")
    env["JUPYTER_CONFIG_DIR"] = str(folder / ".jupyter")
    env["JUPYTERLAB_SETTINGS_DIR"] = str(folder / ".jupyter" / "lab" / "user-settings")
    env["JUPYTERLAB_WORKSPACES_DIR"] = str(folder / ".jupyter" / "lab" / "workspaces")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            f"--IdentityProvider.token={token}",
            "--LabApp.expose_app_in_browser=True",
            "--ServerApp.allow_root=True",
            f"--ServerApp.root_dir={folder}",
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ],
        cwd=folder,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(folder / "lab.log", "w"),
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            break
        except OSError:
            assert server.poll() is None, (folder / "lab.log").read_text()
            assert time.monotonic() < deadline, "JupyterLab did not start"
            time.sleep(0.5)
    yield {"base": base, "token": token, "store": store, "folder": str(folder)}
    server.terminate()
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()


@pytest.fixture(scope="module")
def browser(lab: dict[str, str]) -> Iterator[object]:
    with chromium() as browser:
        yield browser


def open_notebook(browser: object, lab: dict[str, str], name: str) -> object:
    page = browser.new_page(viewport={"width": 1280, "height": 1000})  # type: ignore[attr-defined]
    # A workspace of its own, so that tabs of an earlier test are not restored beside it.
    page.goto(f"{lab['base']}/lab/workspaces/{uuid.uuid4().hex}/tree/{name}?token={lab['token']}")
    page.wait_for_function("window.jupyterapp && window.jupyterapp.shell.currentWidget", timeout=90_000)
    page.wait_for_function(
        "(() => { const w = window.jupyterapp.shell.currentWidget;"
        " return w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel"
        " && w.sessionContext.session.kernel.status === 'idle'; })()",
        timeout=90_000,
    )
    return page


CELL_REPORT = (
    "window.jupyterapp.shell.currentWidget.content.widgets.map(c => [c.model.executionCount, c.model.type === 'code'"
    " ? JSON.stringify(c.model.outputs.toJSON().map(o => [o.ename, o.evalue, o.text])) : ''])"
)


def wait_or_explain(page: object, locator: object, lab: dict[str, str], name: str) -> None:
    """Wait for a widget; if it never shows, save a screenshot and report every cell's outcome."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        locator.wait_for(timeout=90_000)  # type: ignore[attr-defined]
    except PlaywrightTimeout:
        page.screenshot(path=str(Path(lab["folder"]) / f"{name}-failure.png"), full_page=True)  # type: ignore[attr-defined]
        cells = page.evaluate(CELL_REPORT)  # type: ignore[attr-defined]
        raise AssertionError(f"the widget never showed in {name}; cells: {cells}") from None


def run_all(page: object) -> None:
    """Run All, and make sure it started (a command sent while the notebook settles can be lost)."""
    started = (
        "(() => { const w = window.jupyterapp.shell.currentWidget;"
        " return w.content.widgets.some(c => c.model.type === 'code' && c.model.executionCount !== null"
        " && c.model.executionCount > (window.__durableCount || 0)); })()"
    )
    for _ in range(5):
        page.evaluate(  # type: ignore[attr-defined]
            "(() => { const w = window.jupyterapp.shell.currentWidget;"
            " window.__durableCount = Math.max(0, ...w.content.widgets.map(c => c.model.executionCount || 0));"
            " w.content.activeCellIndex = 0; })()"
        )
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")  # type: ignore[attr-defined]
        try:
            page.wait_for_function(started, timeout=15_000)  # type: ignore[attr-defined]
            return
        except Exception:  # noqa: BLE001 - try again: the notebook was not ready for the command
            continue
    raise AssertionError("Run All never started")


def wait_for_run(store: str, name: str, status: str, timeout: float = 90) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = dnb.runs(name, store=store)
        done = runs[runs["status"] == status]
        if len(done):
            return str(done["run_id"].iloc[0])
        time.sleep(0.5)
    raise AssertionError(f"no {name} run reached {status}: {dnb.runs(name, store=store)}")


def test_quickstart_gate_approve_and_finish(browser: object, lab: dict[str, str]) -> None:
    """Run All stops at the gate panel; clicking Approve records it; Run All again completes the run."""
    page = open_notebook(browser, lab, "quickstart.ipynb")
    run_all(page)
    panel = page.locator("text=Approval needed").first  # type: ignore[attr-defined]
    wait_or_explain(page, panel, lab, "quickstart")
    page.locator(".jupyter-widgets textarea").first.fill("Numbers checked in the browser")  # type: ignore[attr-defined]
    run_id = wait_for_run(lab["store"], "quickstart", "paused")
    widget = page.locator(".widget-vbox", has=page.locator("text=Approval needed")).first  # type: ignore[attr-defined]
    widget.scroll_into_view_if_needed()
    widget.screenshot(path=screenshot_path(Path(lab["folder"]), "gate-panel.png"))
    widget.locator("button:has-text('Approve')").click()
    page.locator("text=Approved by").first.wait_for(timeout=60_000)  # type: ignore[attr-defined]
    decided = dnb.get_run(run_id, store=lab["store"])
    assert decided.status in ("running", "pending")
    run_all(page)
    assert wait_for_run(lab["store"], "quickstart", "completed") == run_id
    history = dnb.history(run_id, store=lab["store"])
    assert "approved:review" in set(history["step"])
    decision = [s for s in history["step"] if s.startswith("approved:")]
    assert decision == ["approved:review"]
    page.close()  # type: ignore[attr-defined]


def test_inspector_forks_at_a_checkpoint(browser: object, lab: dict[str, str]) -> None:
    """The inspector shows the fork tree; forking at a checkpoint with an override creates the fork in the store."""
    page = open_notebook(browser, lab, "counterfactuals.ipynb")
    run_all(page)
    wait_or_explain(page, page.locator("text=durable_nb inspector").first, lab, "counterfactuals")  # type: ignore[attr-defined]
    store = f"sqlite:///{lab['folder']}/.durable_nb/counterfactuals.db"  # the notebook's own store
    before = len(dnb.runs("pricing", store=store))
    inspector = page.locator(".widget-vbox", has=page.locator("text=durable_nb inspector")).last  # type: ignore[attr-defined]
    inspector.scroll_into_view_if_needed()
    checkpoints = inspector.locator("select").nth(1)
    options = checkpoints.locator("option")
    first = options.nth(1).get_attribute("value") or options.nth(1).inner_text()
    checkpoints.select_option(index=1)
    inspector.locator("textarea").first.fill("discount = 0.3")
    inspector.locator("button:has-text('Fork here')").click()
    page.locator("text=Created fork").first.wait_for(timeout=60_000)  # type: ignore[attr-defined]
    inspector.screenshot(path=screenshot_path(Path(lab["folder"]), "inspector.png"))
    after = dnb.runs("pricing", store=store)
    assert len(after) == before + 1
    newest = after.iloc[0]
    assert newest["status"] == "pending"
    forked = dnb.get_run(str(newest["run_id"]), store=store)
    assert forked.state["discount"] == 0.3
    assert first is not None
    page.close()  # type: ignore[attr-defined]


def _voice_notebook(folder: Path, store: str) -> Path:
    """A small notebook whose second Run All restores two cells and waits at a gate."""
    import nbformat

    cells = [
        f"%load_ext durable_nb\n%durable run voice --store {store}",
        "%%durable load\nrows = list(range(5))\nprint(f'loaded {len(rows)} rows')",
        "%%durable connect\nimport threading\nlock = threading.Lock()\nretries = 3",
        "%%durable review\nimport durable_nb as dnb\ndecision = dnb.gate('publish?', {'rows': len(rows)})",
    ]
    path = folder / "voice.ipynb"
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, str(path))
    return path


def test_notes_are_quiet_lines_not_error_boxes(browser: object, lab: dict[str, str]) -> None:
    """Issue 18 item 6: restore notes, a warning and a paused gate read as small styled notes in
    JupyterLab, not as stderr (error-coloured) output; the screenshot in docs/ shows them."""
    import nbformat
    from nbclient import NotebookClient

    folder = Path(lab["folder"])
    store = f"sqlite:///{folder}/.durable_nb/voice.db"
    path = _voice_notebook(folder, store)
    # The first Run All, headless: two cells commit, the third pauses at its gate.
    NotebookClient(nbformat.read(str(path), as_version=4), allow_errors=True, kernel_name="python3").execute()
    assert wait_for_run(store, "voice", "paused")
    page = open_notebook(browser, lab, "voice.ipynb")
    run_all(page)
    notes = page.locator(".durable-nb-note")  # type: ignore[attr-defined]
    wait_or_explain(page, page.locator("text=Approval needed").first, lab, "voice")  # type: ignore[attr-defined]
    page.locator(".durable-nb-note:has-text('Waiting at gate')").first.wait_for(timeout=60_000)  # type: ignore[attr-defined]
    texts = notes.all_inner_texts()
    assert any("restored 'load' from checkpoint" in t for t in texts), texts
    assert any("not restored, since they could not be stored: lock" in t for t in texts), texts
    # No note is drawn as stderr, the style JupyterLab gives errors.
    stderr = page.locator("[data-mime-type='application/vnd.jupyter.stderr']")  # type: ignore[attr-defined]
    assert not [t for t in stderr.all_inner_texts() if "durable_nb" in t], stderr.all_inner_texts()
    assert "⏸" not in page.locator(".jp-Notebook").inner_text()  # type: ignore[attr-defined]
    notebook = page.locator(".jp-Notebook").first  # type: ignore[attr-defined]
    notebook.screenshot(path=screenshot_path(folder, "notes.png"))
    page.close()  # type: ignore[attr-defined]
