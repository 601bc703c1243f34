"""The approvals page (issue 17) in headless Chromium: sign in, see the open gate, approve it.

A real ``durable-nb serve`` subprocess; Debian's chromium driven by Playwright. The page shows
the gate's frozen context escaped (a script in it stays text), and Approve with a comment
decides the gate as the token's name; the run then completes in the server. The screenshot in
docs/ is taken here (into the test's folder; docs/refresh-screenshots refreshes the README's).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browserkit import CHROMIUM, chromium, screenshot_path
from servicekit import ADMIN, DECIDER, READER, Server, free_port

import durable_nb as dnb

pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path: Path, store_url: str) -> Iterator[Server]:
    if CHROMIUM is None:
        pytest.skip("browser tests need Debian's chromium (apt-get install chromium); .ci/run installs it")
    pytest.importorskip("playwright", reason="browser tests need Playwright for Python (pip install playwright)")
    from servicekit import FLOWS

    (tmp_path / "service_flows.py").write_text(FLOWS)
    running = Server(tmp_path, store_url, free_port())
    yield running
    running.stop()


@pytest.fixture
def page() -> Iterator[Any]:
    with chromium() as browser:
        yield browser.new_page(viewport={"width": 1100, "height": 700})


def test_approve_a_gate_from_the_page(server: Server, page: Any, store_url: str, tmp_path: Path) -> None:
    hostile = "<script>window.pwned = 1</script>"
    run_id = server.client.run("gated", {"who": hostile})["id"]
    assert server.client.wait(run_id)["status"] == "paused"
    base = server.client.url

    page.goto(f"{base}/")
    assert "sign in" in page.content()  # no token, no page
    page.goto(f"{base}/?token={READER}")
    assert page.url == f"{base}/"  # the token went into a cookie, not the address
    gate = page.locator(f"section.gate[data-run='{run_id}']")
    gate.wait_for()
    assert "publish?" in gate.inner_text() and hostile in gate.inner_text()
    assert page.evaluate("window.pwned") is None  # the context is text, never markup
    page.screenshot(path=screenshot_path(tmp_path, "approvals-page.png"), full_page=True)
    gate.locator("textarea").fill("looks right")
    gate.get_by_role("button", name="Approve").click()
    assert "decide" in page.content()  # a read token cannot decide
    assert server.client.get(run_id)["status"] == "paused"

    page.goto(f"{base}/?token={DECIDER}")
    gate.locator("textarea").fill("looks right")
    gate.get_by_role("button", name="Approve").click()
    page.get_by_text(f"Approved run {run_id}").wait_for()
    assert server.client.wait(run_id, until=("completed", "failed"))["status"] == "completed"
    assert dnb.get_run(run_id, store=store_url).state["by"] == "ana"
    page.goto(f"{base}/runs/{run_id}")
    assert "after:publish" in page.content() and "completed" in page.content()
    assert ADMIN not in page.content()
