"""The approvals page (issue 17) in headless Chromium: sign in, see the open gate, approve it; and
what a page of another origin can do to a signed-in user (issue 27): nothing.

A real ``durable-nb serve`` subprocess; Debian's chromium driven by Playwright. The page shows
the gate's frozen context escaped (a script in it stays text), and Approve with a comment
decides the gate as the token's name; the run then completes in the server. An attacker's page,
served from another port of 127.0.0.1 (the same site: the browser sends it the session cookie),
auto-submits a decision form and frames the page: the gate stays undecided, the frame shows
nothing. The screenshot of the page is
taken here (into the test's folder, or $DURABLE_NB_SCREENSHOTS: docs/refresh-screenshots).
"""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browserkit import chromium, require_browser, screenshot_path
from servicekit import ADMIN, DECIDER, READER, Server, free_port

import durable_nb as dnb

# Chromium on SQLite, but for one PostgreSQL case (the store is tested on both elsewhere).
pytestmark = [pytest.mark.slow, pytest.mark.backends("sqlite")]


@pytest.fixture
def server(tmp_path: Path, store_url: str) -> Iterator[Server]:
    require_browser()
    from servicekit import FLOWS

    (tmp_path / "service_flows.py").write_text(FLOWS)
    running = Server(tmp_path, store_url, free_port())
    yield running
    running.stop()


@pytest.fixture
def page() -> Iterator[Any]:
    with chromium() as browser:
        yield browser.new_page(viewport={"width": 1100, "height": 700})


@pytest.mark.backends("sqlite", "postgres")  # the one PostgreSQL case of the approvals page
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


# -- a page of another origin, on the same host --------------------------------------------------------


@pytest.fixture
def attacker(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A plain web server on another port of 127.0.0.1 serving the files of a folder: the attacker's site."""
    folder = tmp_path / "attacker"
    folder.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=site.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{site.server_address[1]}", folder
    site.shutdown()
    site.server_close()
    thread.join(timeout=30)


def _open_gate(server: Server, store_url: str) -> tuple[str, Any]:
    run_id = server.client.run("gated", {"who": "ana"})["id"]
    assert server.client.wait(run_id)["status"] == "paused"
    return run_id, dnb.get_run(run_id, store=store_url).pending_interrupt


@pytest.mark.parametrize("with_token", [False, True], ids=["plain-form", "form-with-a-token-of-its-own"])
def test_a_form_on_another_port_cannot_decide_for_the_signed_in_user(
    server: Server, page: Any, attacker: tuple[str, Path], store_url: str, with_token: bool
) -> None:
    """CSRF: the user signed in (decide scope) visits a page on another port of the same host that
    auto-submits Approve to /runs/{id}/decide. The browser sends the session cookie along (same
    site), but the request comes from another origin and without the session's token: refused, the
    gate still waits. Issue 27 saw it approve."""
    run_id, gate = _open_gate(server, store_url)
    site, folder = attacker
    base = server.client.url
    page.goto(f"{base}/?token={DECIDER}")
    page.locator(f"section.gate[data-run='{run_id}']").wait_for()
    token = "<input type='hidden' name='csrf' value='" + "0" * 64 + "'>" if with_token else ""
    (folder / "win.html").write_text(
        "<!doctype html><title>You won</title>"
        f"<form method='post' action='{base}/runs/{run_id}/decide'>"
        f"<input type='hidden' name='approved' value='true'><input type='hidden' name='node' value='{gate['node_id']}'>"
        f"<input type='hidden' name='comment' value='pwned'>{token}</form>"
        "<script>document.forms[0].submit()</script>"
    )
    with page.expect_response(f"{base}/runs/{run_id}/decide") as posted:
        page.goto(f"{site}/win.html")
    answer = posted.value
    sent = answer.request.all_headers()
    assert sent.get("cookie", "").startswith("durable_nb_token=")  # the browser sent the session along
    assert sent["origin"] == site
    assert answer.status == 403
    assert dnb.get_run(run_id, store=store_url).pending_interrupt == gate
    assert "approved:publish" not in set(dnb.history(run_id, store=store_url)["step"])


def test_a_page_on_another_port_cannot_frame_the_approvals_page(
    server: Server, page: Any, attacker: tuple[str, Path], store_url: str
) -> None:
    """Clickjacking: a page on another port frames the signed-in approvals page; the browser blocks the
    frame (frame-ancestors 'none', X-Frame-Options DENY): no gate, no button inside it."""
    run_id, _ = _open_gate(server, store_url)
    site, folder = attacker
    base = server.client.url
    page.goto(f"{base}/?token={DECIDER}")
    assert page.get_by_role("button", name="Approve").count() == 1  # signed in, the button is there
    (folder / "frame.html").write_text(
        f"<!doctype html><title>Free prize</title><iframe id='victim' src='{base}/' width=900 height=600></iframe>"
    )
    with page.expect_response(f"{base}/") as framed:
        page.goto(f"{site}/frame.html")
    assert framed.value.status == 200  # the server answered; the browser refused to show it in the frame
    [inner] = [f for f in page.frames if f is not page.main_frame]
    inner.wait_for_load_state()
    assert inner.locator("button").count() == 0
    assert inner.locator(f"section.gate[data-run='{run_id}']").count() == 0
    assert dnb.get_run(run_id, store=store_url).status == "paused"
