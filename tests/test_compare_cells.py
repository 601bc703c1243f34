"""compare_cells: the cells of a notebook run and its forks side by side (real IPython shells, real stores).

One row per cell and per run: a fork's cells before its fork point are inherited (with the value
the fork set), cells it has not reached are pending (missing once it ended); values compare by
their stored addresses, outputs by a digest that ignores what changes when nothing else does; in a
notebook the frame shows every run's outputs in a column of its own, escaped, the cells that differ
marked. Bad input gets durable_nb's typed errors.
"""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pandas as pd
import pytest
from browserkit import CHROMIUM, chromium, screenshot_path
from flows import pricing
from jupyterkit import TOKEN, JupyterServer
from kernelkit import Kernel
from shellkit import Shell
from test_widgets import OutputProbe

import durable_nb as dnb
from durable_nb.jupyter.stores import store_key
from durable_nb.views.cells import output_digest

PNG_HELPER = """\
import struct as _struct, zlib as _zlib
def _png(red):
    def chunk(kind, data):
        return _struct.pack('>I', len(data)) + kind + data + _struct.pack('>I', _zlib.crc32(kind + data))
    header = _struct.pack('>IIBBBBB', 1, 1, 8, 2, 0, 0, 0)
    pixel = _zlib.compress(bytes([0, red % 256, 0, 0]))
    return b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', header) + chunk(b'IDAT', pixel) + chunk(b'IEND', b'')
"""
PARAM = "%%durable param\nalpha = 0.1\nprint('alpha is', alpha)"
# object() prints a different address in every run: the digest must not see it.
LOAD = "%%durable load\nrows = [1, 2, 3]\nprint('loaded', len(rows), 'rows', object())"
FIT = (
    "%%durable fit\nfrom IPython.display import HTML\ncoef = alpha * 10\n"
    "print('<script>alert(1)</script> coef', coef)\nHTML(f'<script>alert(2)</script><b>coef {coef}</b>')"
)
PLOT = "%%durable plot\nfrom IPython.display import Image\nImage(data=_png(int(alpha * 100)), format='png')"
REPORT = "%%durable report\nprint('report done')"
CELLS = [PARAM, LOAD, FIT, PLOT, REPORT]
NAMES = ["param", "load", "fit", "plot", "report"]


@pytest.fixture
def shells(store_url: str) -> Iterator[Callable[..., Shell]]:
    made: list[Shell] = []

    def new_shell(name: str = "cmp", run_id: str | None = None) -> Shell:
        made.append(Shell(store_url, name, run_id))
        made[-1].ok(PNG_HELPER)
        return made[-1]

    yield new_shell
    for shell in made:
        shell.close()


def _run_and_fork(shells: Callable[..., Shell]) -> tuple[Shell, str, str]:
    """Run every cell, fork before 'fit' with alpha=1.0 and run the fork up to 'plot': the shell, both ids."""
    shell = shells()
    shell.run_all(*CELLS)
    original = shell.run_id
    shell.ok("%durable fork --at fit --set alpha=1.0")
    shell.run_all(*CELLS[:4])
    return shell, original, shell.run_id


def _by_cell(frame: pd.DataFrame, run_id: str) -> pd.DataFrame:
    return frame[frame["run_id"] == run_id].set_index("cell")


def test_one_row_per_cell_and_run_with_what_a_fork_changed(shells: Callable[..., Shell], store_url: str) -> None:
    """A fork of one value: inherited cells keep their outputs but carry the fork's value; the cells
    after the fork point differ where alpha reached them; the cell the fork did not reach is pending."""
    shell, original, fork = _run_and_fork(shells)
    frame = dnb.compare_cells([original, fork], store=store_url)

    assert isinstance(frame, pd.DataFrame) and len(frame) == 10
    assert list(dict.fromkeys(frame["cell"])) == NAMES
    assert list(frame["run_id"]) == [original, fork] * 5
    assert str(frame["status"].dtype) == "category" and str(frame["duration"].dtype) == "timedelta64[ns]"
    first, forked = _by_cell(frame, original), _by_cell(frame, fork)
    assert list(first["status"]) == ["ok"] * 5
    assert list(forked["status"]) == ["inherited", "inherited", "ok", "ok", "pending"]
    assert list(forked["inherited_from"][:2]) == [original, original]
    assert not first["values_differ"].any() and not first["outputs_differ"].any()

    assert forked.loc["param", "changed"] == ["alpha"] and forked.loc["param", "overridden"] == ["alpha"]
    assert forked.loc["param", "differing"] == ["alpha"] and forked.loc["param", "values_differ"]
    assert not forked.loc["param", "outputs_differ"]  # its printed outputs are the original's
    assert not forked.loc["load", "values_differ"] and not forked.loc["load", "outputs_differ"]
    assert forked.loc["fit", "differing"] == ["coef"] and forked.loc["fit", "outputs_differ"]
    assert forked.loc["plot", "outputs_differ"] and not forked.loc["plot", "values_differ"]
    assert forked.loc["load", "output_digest"] == first.loc["load", "output_digest"]
    assert forked.loc["fit", "output_digest"] != first.loc["fit", "output_digest"]
    pending = forked.loc["report"]
    assert pd.isna(pending["output_digest"]) and pd.isna(pending["values_differ"]) and pd.isna(pending["duration"])
    assert (first["duration"] > pd.Timedelta(0)).all()
    assert "coef 10.0" in "".join(o.get("text", "") for o in forked.loc["fit", "outputs"])

    # The run handles the API returns, or the kernel's own run, are taken as their ids.
    handles = dnb.compare_cells([dnb.get_run(original, store=store_url), shell.session.require()], store=store_url)
    pd.testing.assert_frame_equal(pd.DataFrame(handles), pd.DataFrame(frame))
    # A single run stands for it and its forks; the async twin gives the same frame.
    pd.testing.assert_frame_equal(pd.DataFrame(dnb.compare_cells(original, store=store_url)), pd.DataFrame(frame))
    twin = asyncio.run(dnb.acompare_cells([original, fork], store=store_url))
    pd.testing.assert_frame_equal(pd.DataFrame(twin), pd.DataFrame(frame))

    shell.ok("%durable end")  # a finished fork will never reach 'report': missing
    ended = _by_cell(dnb.compare_cells([original, fork], store=store_url), fork)
    assert ended.loc["report", "status"] == "missing"


def test_equal_outputs_of_another_run_have_equal_digests(shells: Callable[..., Shell], store_url: str) -> None:
    """A second run of the same notebook from scratch: the same values and outputs (an object address
    printed differently) read as equal; a cell one run left failed reads failed and differs nowhere else."""
    first = shells()
    first.run_all(*CELLS)
    original = first.leave()
    second = shells()
    second.ok(f"%durable run cmp --new --store {store_url}")
    second.run_all(*CELLS[:4])
    assert not second.run("%%durable report\nraise ValueError('no report')").success
    frame = dnb.compare_cells([original, second.run_id], store=store_url)
    again = _by_cell(frame, second.run_id)
    assert list(again["status"]) == ["ok", "ok", "ok", "ok", "failed"]
    assert not again["values_differ"][:4].any() and not again["outputs_differ"][:4].any()
    assert list(again["output_digest"][:4]) == list(_by_cell(frame, original)["output_digest"][:4])
    printed = [[o["text"] for o in _by_cell(frame, r).loc["load", "outputs"]] for r in (original, second.run_id)]
    assert printed[0] != printed[1]  # the printed object addresses differ; the digests do not


def test_the_digest_ignores_stream_splits_addresses_and_display_ids() -> None:
    """What a kernel varies from run to run changes no digest; any change of text, data or kind does."""
    whole = [{"type": "stream", "name": "stdout", "text": "a\nb <X at 0x7f00aa>\n"}]
    split = [
        {"type": "stream", "name": "stdout", "text": "a\n"},
        {"type": "stream", "name": "stdout", "text": "b <X at 0x7f11bb>\n"},
    ]
    assert output_digest(whole) == output_digest(split)
    image = {"type": "display", "data": {"image/png": "iVBORw0K\nGgo="}, "metadata": {}}
    same = {"type": "display", "data": {"image/png": "iVBORw0KGgo="}, "metadata": {"transient": {"display_id": "x"}}}
    assert output_digest([image]) == output_digest([same])
    assert output_digest([image]) != output_digest([{**image, "data": {"image/png": "iVBORw0KGgp="}}])
    assert output_digest(whole) != output_digest([{**whole[0], "name": "stderr"}])
    assert output_digest([]) is not None and output_digest(None) is None


def test_the_notebook_view_shows_outputs_side_by_side_escaped_and_marks_what_differs(
    shells: Callable[..., Shell], store_url: str
) -> None:
    """The HTML has one column per run: printed markup is escaped, stored HTML is only inside a sandboxed
    iframe's escaped srcdoc, the images of both runs sit in one row, and the differing cells are marked."""
    _, original, fork = _run_and_fork(shells)
    page = dnb.compare_cells([original, fork], store=store_url)._repr_html_()

    assert "<script" not in page.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt; coef 1.0" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; coef 10.0" in page
    assert re.search(r'<iframe sandbox="" [^>]*srcdoc="&lt;script&gt;alert\(2\)', page)
    rows = dict(re.findall(r'<tr class="([^"]*)" data-cell="(\w+)"', page)[i][::-1] for i in range(5))
    assert rows["fit"].endswith("durable-nb-differs") and rows["plot"].endswith("durable-nb-differs")
    assert rows["param"].endswith("durable-nb-differs")  # alpha, set by the fork
    assert not rows["load"].endswith("durable-nb-differs") and not rows["report"].endswith("durable-nb-differs")
    fit_row = page.split('data-cell="fit"')[1].split("</tr>")[0]
    assert "≠ outputs differ" in fit_row and "≠ values differ: coef" in fit_row
    plot_row = page.split('data-cell="plot"')[1].split("</tr>")[0]
    images = re.findall(r'<td[^>]*>.*?<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', plot_row)
    assert len(images) == 2 and images[0] != images[1]
    assert all(base64.b64decode(i).startswith(b"\x89PNG") for i in images)
    assert page.count("<th data-run=") == 2


def test_hostile_outputs_are_never_emitted_as_markup(shells: Callable[..., Shell], store_url: str) -> None:
    """JavaScript is named, not shown; an image whose data is not base64 is not shown; an SVG is only an
    <img> of a base64 data URI; HTML only in a sandboxed iframe's escaped srcdoc."""
    shell = shells()
    shell.ok(
        "%%durable hostile\npub = get_ipython().display_pub.publish\n"
        "pub({'application/javascript': 'alert(3)'}, {})\n"
        "pub({'image/png': 'AAAA\" onerror=\"alert(4)', 'text/plain': 'a broken image'}, {})\n"
        "pub({'image/svg+xml': '<svg onload=\"alert(5)\"><script>alert(6)</script></svg>'}, {})\n"
        "pub({'text/html': '<img src=x onerror=alert(7)>', 'text/plain': 'html <b>'}, {})\n"
    )
    page = dnb.compare_cells([shell.run_id], store=store_url)._repr_html_()
    assert "alert(3)" not in page and "[application/javascript output, not shown here]" in page
    assert "alert(4)" not in page and "a broken image" in page
    assert "alert(5)" not in page and "alert(6)" not in page
    assert re.search(r'<img src="data:image/svg\+xml;base64,[A-Za-z0-9+/=]+" alt="SVG output">', page)
    assert "<img src=x" not in page and 'srcdoc="&lt;img src=x onerror=alert(7)&gt;"' in page
    assert "html &lt;b&gt;" in page


def test_the_inspector_compares_the_cells_of_a_run_and_its_forks(
    shells: Callable[..., Shell], store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compare cells in the inspector shows compare_cells of the selected run and its forks."""
    probe = OutputProbe(monkeypatch)
    _, original, fork = _run_and_fork(shells)
    inspector = dnb.inspect(original, store=store_url)
    try:
        assert {value for _, value in inspector.tree.options} == {original, fork}
        inspector.compare_cells_button.click()
        [frame] = probe.objects(inspector.comparison)
        assert list(dict.fromkeys(frame["run_id"])) == [original, fork]
        assert "durable-nb-differs" in frame._repr_html_()
    finally:
        inspector.close()


def test_bad_input_gets_typed_errors(shells: Callable[..., Shell], store_url: str, tmp_path: Path) -> None:
    """No runs, a run given twice, something that is no run, an unknown id, a run of another notebook or
    a workflow's run next to a notebook's, a store that does not exist: each refused with its own error."""
    shell = shells()
    shell.run_all(PARAM)
    notebook_run = shell.run_id
    other = shells("another-notebook")
    other.run_all(PARAM)
    workflow_run = pricing(store_url).run({"rate": 0.1})
    with pytest.raises(dnb.InvalidInput, match="at least one run"):
        dnb.compare_cells([], store=store_url)
    with pytest.raises(dnb.InvalidInput, match="more than once"):
        dnb.compare_cells([notebook_run, notebook_run], store=store_url)
    for wrong in (5, None, [notebook_run, None], {"a": 1}):
        with pytest.raises(dnb.InvalidInput):
            dnb.compare_cells(wrong, store=store_url)
    with pytest.raises(dnb.RunNotFound):
        dnb.compare_cells([notebook_run, "01900000-0000-7000-8000-000000000000"], store=store_url)
    with pytest.raises(dnb.InvalidInput, match="not a run of 'cmp'"):
        dnb.compare_cells([notebook_run, other.run_id], store=store_url)
    with pytest.raises(dnb.InvalidInput, match="workflow run"):
        dnb.compare_cells([notebook_run, workflow_run.id], store=store_url)
    assert len(dnb.compare_cells([notebook_run], store=store_url)) == 1
    missing = f"sqlite:///{tmp_path}/no-such-store.db"
    with pytest.raises(dnb.StoreNotFound):
        dnb.compare_cells([notebook_run], store=missing)
    assert not (tmp_path / "no-such-store.db").exists()


def test_workflow_runs_compare_node_by_node(store_url: str) -> None:
    """A workflow and a fork of it resumed with another rate: nodes are its cells, without outputs."""
    flow = pricing(store_url)
    root = flow.run({"rate": 0.1})
    history = dnb.history(root.id, store=store_url)
    after_load = history[history["step"] == "after:load"]["checkpoint_id"].iloc[0]
    fork = flow.fork(root.id, after_load, state={"rate": 0.5})
    frame = dnb.compare_cells([root.id, fork.id], store=store_url)
    forked = _by_cell(frame, fork.id)
    assert list(dict.fromkeys(frame["cell"])) == ["load", "discount", "total"]
    assert list(forked["status"]) == ["inherited", "ok", "ok"]
    assert forked.loc["total", "differing"] == ["total"] and frame["output_digest"].isna().all()


@pytest.mark.backends("sqlite")
def test_a_real_kernels_figures_sit_next_to_each_other(tmp_path: Path, store_url: str) -> None:
    """In a real kernel (every cell durable with --all), a matplotlib figure is a display output: the
    original's and the fork's are two PNG images in one row, marked as differing."""
    kernel = Kernel(tmp_path, env={"DURABLE_NB_STORE": store_url})
    try:
        cells = [
            "%load_ext durable_nb\n%durable run figures --all",
            "%%durable param\nalpha = 0.2",
            "%%durable plot\nimport matplotlib.pyplot as plt\nfig, ax = plt.subplots(figsize=(2, 2))\n"
            "ax.bar([0], [alpha])\nax.set_ylim(0, 1)\nplt.show()",
        ]
        assert all(r.status == "ok" for r in kernel.run_all(cells))
        original = dnb.runs("figures", store=store_url)["run_id"].iloc[0]
        assert kernel.run("%durable fork --at plot --set alpha=0.9").status == "ok"
        assert all(r.status == "ok" for r in kernel.run_all(cells[1:]))
        fork = next(i for i in dnb.runs("figures", store=store_url)["run_id"] if i != original)
    finally:
        kernel.close()
    frame = dnb.compare_cells([original, fork], store=store_url)
    plot = _by_cell(frame, fork).loc["plot"]
    assert plot["status"] == "ok" and plot["outputs_differ"]
    assert any(o["type"] == "display" and "image/png" in o["data"] for o in plot["outputs"])
    row = frame._repr_html_().split('data-cell="plot"')[1].split("</tr>")[0]
    assert len(re.findall(r'<img src="data:image/png;base64,', row)) == 2 and "≠ outputs differ" in row


def test_a_fork_of_a_fork_inherits_from_both_with_both_values(shells: Callable[..., Shell], store_url: str) -> None:
    """A fork (alpha) of the run, then a fork (beta) of that fork: the second's first cells come from the
    original, each carrying the value the fork above it set."""
    a, b = "%%durable a\nalpha = 0.1", "%%durable b\nbeta = 0.2"
    c = "%%durable c\ntotal = alpha + beta\nprint('TOTAL', total)"
    shell = shells()
    shell.run_all(a, b, c)
    original = shell.run_id
    shell.ok("%durable fork --at c --set alpha=1.0")
    shell.run_all(a, b, c)
    first_fork = shell.run_id
    shell.ok("%durable fork --at c --set beta=2.0")
    shell.run_all(a, b, c)
    second_fork = shell.run_id
    frame = dnb.compare_cells([original, first_fork, second_fork], store=store_url)
    second = _by_cell(frame, second_fork)
    assert list(second["status"]) == ["inherited", "inherited", "ok"]
    assert list(second["inherited_from"][:2]) == [original, original]
    assert list(second["differing"]) == [["alpha"], ["beta"], ["total"]]
    assert list(second["overridden"]) == [["alpha"], ["beta"], []]
    assert list(_by_cell(frame, first_fork)["differing"]) == [["alpha"], [], ["total"]]
    assert "TOTAL 3.0" in second.loc["c", "outputs"][0]["text"]


@pytest.mark.backends("sqlite")
def test_jupyters_page_shows_the_cells_under_a_policy_that_runs_nothing(
    shells: Callable[..., Shell], store_url: str, tmp_path: Path
) -> None:
    """/durable/compare/<run> on Jupyter's sign-in: the run and its forks side by side; its policy allows
    the page's own styles by hash and data: images, no script; in Chromium the styles and images apply."""
    _, original, fork = _run_and_fork(shells)
    server = JupyterServer(tmp_path, env={"DURABLE_NB_STORE": store_url})
    try:
        key = store_key(store_url)
        page = server.get(f"/durable/compare/{original}", params={"store": key})
        assert page.status_code == 200, page.text
        policy = page.headers["content-security-policy"]
        assert policy.startswith("default-src 'none'; style-src 'unsafe-hashes' 'sha256-")
        assert "unsafe-inline" not in policy and "script-src" not in policy and "img-src data:;" in policy
        assert page.headers["x-frame-options"] == "DENY"
        assert f'data-run="{original}"' in page.text and f'data-run="{fork}"' in page.text
        assert "<script" not in page.text.lower()
        chosen = server.get(f"/durable/compare/{fork}", params={"store": key, "with": original})
        assert chosen.text.index(f'data-run="{fork}"') < chosen.text.index(f'data-run="{original}"')
        unknown = server.get("/durable/compare/01900000-0000-7000-8000-000000000000", params={"store": key})
        assert unknown.status_code == 404 and "No run with id" in unknown.text
        assert server.get(f"/durable/compare/{original}").status_code == 400
        with httpx.Client(base_url=server.url, timeout=60) as stranger:
            refused = stranger.get(f"/durable/compare/{original}", params={"store": key})
            assert refused.status_code == 302 and "coef" not in refused.text
        if CHROMIUM is None:
            return
        with chromium() as browser:
            tab = browser.new_page()
            tab.goto(f"{server.url}/durable/compare/{original}?store={key}&token={TOKEN}")
            shown = tab.evaluate(
                "() => ({images: Array.from(document.images).map(i => i.naturalWidth),"
                " marked: getComputedStyle(document.querySelector('tr.durable-nb-differs > th')).backgroundColor,"
                " badge: getComputedStyle(document.querySelector('.durable-nb-status')).borderRadius})"
            )
            tab.screenshot(path=screenshot_path(tmp_path, "compare-cells.png"), full_page=True)
        assert shown["images"] == [1, 1]  # the two 1x1 PNGs, both loaded
        assert shown["marked"] == "rgb(253, 230, 138)" and shown["badge"] != "0px"
    finally:
        server.stop()
