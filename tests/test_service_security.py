"""The service as an attacker meets it (issue 27 items 1-4): every refusal over plain HTTP.

Most checks run against the real app in process (Starlette's TestClient runs its lifespan) on
both backends, and then look into the store: a refused request changes nothing. The checks that
depend on the server itself (the body never read, the server's memory, what ``serve`` prints)
run ``durable-nb serve`` as a subprocess and speak raw HTTP to it. The same attacks from a real
browser are in tests/test_approvals_page.py.
"""

from __future__ import annotations

import json
import re
import select
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import durable_nb as dnb
from durable_nb.service.auth import Auth, load_tokens

pytest.importorskip("fastapi", reason="the service needs the serve extra (fastapi, uvicorn)")

import httpx
from fastapi.testclient import TestClient
from servicekit import ADMIN, BASE, DECIDER, FLOWS, READER, TOKENS, Server, gate_form, load_flows

from durable_nb.service.app import create_app
from durable_nb.service.page import STYLE_HASH

# HTTP refusals do not depend on the store: SQLite here; the service's PostgreSQL cases are in test_service.py.
pytestmark = pytest.mark.backends("sqlite")
JSON = {"Content-Type": "application/json"}


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def flows(tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    return load_flows(tmp_path, store_url, monkeypatch)


def _app(flows: Any, store_url: str, *, open_access: bool = False, **options: Any) -> Any:
    auth = Auth(load_tokens(environ={"DURABLE_NB_TOKENS": TOKENS}), open_access=open_access)
    return create_app([flows.gated, flows.slow], store=store_url, auth=auth, recover_every=3600, **options)


@pytest.fixture
def client(flows: Any, store_url: str) -> Iterator[TestClient]:
    with TestClient(_app(flows, store_url), base_url=BASE) as found:
        yield found


@pytest.fixture
def open_client(flows: Any, store_url: str) -> Iterator[TestClient]:
    """The app as ``--no-auth`` serves it: no tokens, which the other checks must make up for."""
    with TestClient(_app(flows, store_url, open_access=True), base_url=BASE) as found:
        yield found


def _paused(flows: Any) -> str:
    run = flows.gated.run({"who": "ana"})
    assert run.status == "paused"
    return str(run.id)


def _stored(store_url: str, run_id: str) -> tuple[str, list[str], Any]:
    """What a refused request must leave as it was: the run's status, its checkpoints, its open gate."""
    run = dnb.get_run(run_id, store=store_url)
    return run.status, dnb.history(run_id, store=store_url)["step"].tolist(), run.pending_interrupt


def _refused(response: Any, status: int, error: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"] == error and response.json()["message"]


# -- item 2: security headers on every response ----------------------------------------------------


def _check_headers(response: Any) -> None:
    policy = response.headers["content-security-policy"]
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["default-src"] == "'none'"
    assert directives["style-src"] == f"'{STYLE_HASH}'"
    assert directives["form-action"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert directives["base-uri"] == "'none'"
    assert "script-src" not in directives and "unsafe" not in policy
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "same-origin"


def test_every_response_carries_the_security_headers(client: TestClient, flows: Any) -> None:
    """Pages, the API, refusals and Starlette's own answers all carry a CSP that allows no script, no
    framing and only the page's stylesheet (by its hash), and X-Frame-Options, nosniff, Referrer-Policy."""
    run_id = _paused(flows)
    signed_in = _bearer(READER)
    answers = [
        client.get("/", headers=signed_in),
        client.get(f"/runs/{run_id}", headers=signed_in),
        client.get("/"),  # the sign-in hint
        client.get("/api/runs", headers=signed_in),
        client.get("/api/runs"),  # 401
        client.get("/api/runs/nope", headers=signed_in),  # 404
        client.get("/nowhere"),  # Starlette's 404
        client.get("/api/runs", headers={**signed_in, "Host": "attacker.example"}),  # 400
        client.post("/api/runs/x/cancel", headers={**_bearer(ADMIN), "Content-Type": "text/plain"}),  # 415
        client.get("/openapi.json"),
    ]
    for answer in answers:
        _check_headers(answer)
    assert all(answer.headers["cache-control"] == "no-store" for answer in answers)
    page = answers[0]
    style = re.search(r"<style>(.*?)</style>", page.text, re.DOTALL)
    assert style is not None and "<script" not in page.text and " style=" not in page.text
    import base64
    import hashlib

    assert STYLE_HASH == "sha256-" + base64.b64encode(hashlib.sha256(style.group(1).encode()).digest()).decode()
    assert client.get("/docs").status_code == 404  # the interactive docs would need a CDN's scripts


# -- item 3: the Host allow-list, JSON only, no foreign Origin ----------------------------------------


@pytest.mark.parametrize("open_access", [False, True], ids=["tokens", "no-auth"])
@pytest.mark.parametrize(
    ("host", "answered"),
    [
        ("attacker.example", False),
        ("attacker.example:8000", False),
        ("127.0.0.1.attacker.example", False),
        ("localhost.", False),
        ("[::2]:8000", False),
        ("", False),
        ("localhost", True),
        ("LOCALHOST:8000", True),
        ("127.0.0.1:45123", True),
        ("[::1]:8000", True),
    ],
)
def test_only_known_host_names_are_answered(
    flows: Any, store_url: str, open_access: bool, host: str, answered: bool
) -> None:
    """DNS rebinding: a request naming another host is refused with 400 HostNotAllowed, tokens or not;
    loopback names with any port are answered."""
    with TestClient(_app(flows, store_url, open_access=open_access), base_url=BASE) as client:
        response = client.get("/api/runs", headers={**_bearer(READER), "Host": host})
    if answered:
        assert response.status_code == 200, response.text
    else:
        _refused(response, 400, "HostNotAllowed")
        assert "--allowed-host" in response.json()["message"]
        assert "[::1]" not in response.json()["message"]  # the names it answers for are not told


def test_the_bound_host_and_allowed_hosts_are_answered(flows: Any, store_url: str) -> None:
    """The address the server binds (not a wildcard one) and each --allowed-host are answered too;
    a pattern *.example.com answers its subdomains."""
    app = _app(flows, store_url, host="10.1.2.3", allowed_host=["runs.example.org", "*.corp.example", "::5"])
    with TestClient(app, base_url=BASE) as client:
        for host in ("10.1.2.3:8000", "runs.example.org", "a.corp.example:443", "[::5]:80", "localhost"):
            assert client.get("/api/runs", headers={**_bearer(READER), "Host": host}).status_code == 200, host
        for host in ("example.org", "corp.example", "10.1.2.4", "0.0.0.0"):
            _refused(client.get("/api/runs", headers={**_bearer(READER), "Host": host}), 400, "HostNotAllowed")
    with TestClient(_app(flows, store_url, host="0.0.0.0"), base_url=BASE) as client:
        _refused(client.get("/api/runs", headers={**_bearer(READER), "Host": "0.0.0.0"}), 400, "HostNotAllowed")


@pytest.mark.parametrize("name", ["*", "http://x.example", "x.example:80", "a b", "*x.example", "", "x/y"])
def test_an_allowed_host_that_is_no_host_name_is_a_configuration_error(flows: Any, store_url: str, name: str) -> None:
    with pytest.raises(dnb.ConfigurationError, match="--allowed-host"):
        _app(flows, store_url, allowed_host=[name])


@pytest.mark.parametrize(
    ("path", "body"),
    [("/api/runs/{run}/cancel", ""), ("/api/runs/{run}/approve", '{"approved": true, "node": "publish"}')],
    ids=["cancel", "approve"],
)
@pytest.mark.parametrize(
    ("headers", "status", "error"),
    [
        pytest.param({"Content-Type": "text/plain"}, 415, "UnsupportedMediaType", id="text-plain"),
        pytest.param(
            {"Content-Type": "application/x-www-form-urlencoded"}, 415, "UnsupportedMediaType", id="form-encoded"
        ),
        pytest.param({"Content-Type": "multipart/form-data; boundary=x"}, 415, "UnsupportedMediaType", id="multipart"),
        pytest.param({}, 415, "UnsupportedMediaType", id="no-type"),
        pytest.param(
            {"Content-Type": "text/plain", "Origin": "http://127.0.0.1:9999"},
            403,
            "CrossSiteRequest",
            id="text-plain-from-another-port",
        ),
        pytest.param({**JSON, "Origin": "http://127.0.0.1:9999"}, 403, "CrossSiteRequest", id="json-from-another-port"),
        pytest.param({**JSON, "Origin": "null"}, 403, "CrossSiteRequest", id="json-from-a-sandbox"),
        pytest.param({**JSON, "Origin": "https://127.0.0.1"}, 403, "CrossSiteRequest", id="json-other-scheme"),
        pytest.param({**JSON, "Referer": "http://evil.example/page"}, 403, "CrossSiteRequest", id="foreign-referer"),
    ],
)
def test_a_cross_origin_post_changes_nothing_without_tokens(
    open_client: TestClient,
    flows: Any,
    store_url: str,
    path: str,
    body: str,
    headers: dict[str, str],
    status: int,
    error: str,
) -> None:
    """Under --no-auth, what a page of another origin can send (a simple text/plain or form POST, or
    one naming its origin) is refused, and the run and its gate stay as they were."""
    run_id = _paused(flows)
    before = _stored(store_url, run_id)
    _refused(open_client.post(path.format(run=run_id), content=body, headers=headers), status, error)
    assert _stored(store_url, run_id) == before


def test_json_from_this_origin_or_no_browser_is_accepted(open_client: TestClient, flows: Any, store_url: str) -> None:
    """A JSON POST naming no origin (a script) or this server's own is what the API is for."""
    run_id = _paused(flows)
    assert (
        open_client.post(f"/api/runs/{run_id}/approve", content='{"node": "publish"}', headers=JSON).status_code == 202
    )
    other = _paused(flows)
    answer = open_client.post(f"/api/runs/{other}/cancel", headers={**JSON, "Origin": BASE})
    assert answer.status_code == 200 and answer.json()["status"] == "cancelled"


def test_mcp_over_http_takes_the_same_checks(client: TestClient) -> None:
    """/mcp/ is the API's twin: the token before the body, JSON only, no foreign origin."""
    _refused(client.post("/mcp/", content="{}", headers=JSON), 401, "Unauthorized")
    reader = _bearer(READER)
    _refused(
        client.post("/mcp/", content="{}", headers={**reader, "Content-Type": "text/plain"}),
        415,
        "UnsupportedMediaType",
    )
    foreign = {**reader, **JSON, "Origin": "http://127.0.0.1:9999"}
    _refused(client.post("/mcp/", content="{}", headers=foreign), 403, "CrossSiteRequest")
    _refused(client.post("/mcp/", content="[" * 100, headers={**reader, **JSON}), 400, "JsonTooDeep")


def test_mcp_answers_under_an_allowed_host_name(flows: Any, store_url: str) -> None:
    """A name added with --allowed-host reaches /mcp/ too (the SDK's own loopback-only check is off;
    the service's Host and Origin checks stand in front of it)."""
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    accept = {"Accept": "application/json, text/event-stream"}
    with TestClient(
        _app(flows, store_url, allowed_host=["runs.example.org"]), base_url="http://runs.example.org"
    ) as client:
        answer = client.post("/mcp/", json=hello, headers={**_bearer(READER), **accept})
        assert answer.status_code == 200, answer.text
        assert answer.json()["result"]["serverInfo"]["name"] == "durable_nb"
        foreign = {**_bearer(READER), **accept, "Origin": "http://runs.example.org:9999"}
        _refused(client.post("/mcp/", json=hello, headers=foreign), 403, "CrossSiteRequest")


# -- item 1: the approvals page's forms -------------------------------------------------------------


def _signed_in(client: TestClient, token: str = DECIDER) -> None:
    """Sign the client in as a browser does: /?token=… once, a cookie from then on."""
    assert client.get(f"/?token={token}", follow_redirects=False).status_code == 303
    assert "durable_nb_token" in client.cookies


def _post_form(client: TestClient, run_id: str, fields: dict[str, Any], headers: dict[str, Any] | None = None) -> Any:
    """Post a decision form from the page (Origin: this server), with ``headers`` changed (None: left out)."""
    sent = {k: v for k, v in {"Origin": BASE, **(headers or {})}.items() if v is not None}
    if sent.get("Content-Type") == "text/plain":
        body = "&".join(f"{k}={v}" for k, v in fields.items())
        return client.post(f"/runs/{run_id}/decide", content=body, headers=sent)
    return client.post(f"/runs/{run_id}/decide", data=fields, headers=sent)


@pytest.mark.parametrize(
    ("change", "headers", "status", "says"),
    [
        pytest.param({"csrf": None}, {}, 403, "token", id="no-csrf-token"),
        pytest.param({"csrf": "0" * 64}, {}, 403, "token", id="wrong-csrf-token"),
        pytest.param({"csrf": ""}, {}, 403, "token", id="empty-csrf-token"),
        pytest.param({}, {"Origin": "http://127.0.0.1:9999"}, 403, "comes from", id="other-port"),
        pytest.param({}, {"Origin": "http://127.0.0.1.evil.example"}, 403, "comes from", id="other-host"),
        pytest.param({}, {"Origin": "null"}, 403, "comes from", id="null-origin"),
        pytest.param(
            {}, {"Origin": None, "Referer": "http://127.0.0.1:9999/x"}, 403, "comes from", id="foreign-referer"
        ),
        pytest.param({}, {"Origin": None}, 403, "names no origin", id="no-origin-no-referer"),
        pytest.param({"approved": None}, {}, 400, "approved must be", id="no-approved"),
        pytest.param({"approved": "yes"}, {}, 400, "approved must be", id="approved-yes"),
        pytest.param({"approved": "TRUE"}, {}, 400, "approved must be", id="approved-upper-case"),
        pytest.param({"approved": ""}, {}, 400, "approved must be", id="approved-empty"),
        pytest.param({"approved": ["true", "false"]}, {}, 400, "more than once", id="approved-twice"),
        pytest.param({}, {"Content-Type": "text/plain"}, 415, "posts application/x-www-form-urlencoded", id="text"),
    ],
)
def test_a_page_form_that_is_not_this_session_s_decides_nothing(
    client: TestClient,
    flows: Any,
    store_url: str,
    change: dict[str, Any],
    headers: dict[str, Any],
    status: int,
    says: str,
) -> None:
    """The signed-in user's own cookie is not enough: a form is refused unless it carries the session's
    CSRF token, comes from this origin, and says approved=true or false; nothing is decided."""
    run_id = _paused(flows)
    _signed_in(client)
    fields: dict[str, Any] = {**gate_form(client.get("/").text, run_id), "approved": "true", "comment": "ok"}
    fields = {k: v for k, v in {**fields, **change}.items() if v is not None}
    before = _stored(store_url, run_id)
    answer = _post_form(client, run_id, fields, headers)
    assert answer.status_code == status, answer.text
    assert says in answer.text.replace("&#x27;", "'")
    assert _stored(store_url, run_id) == before


def test_a_token_of_another_session_is_refused(client: TestClient, flows: Any, store_url: str) -> None:
    """A CSRF token is bound to its session: one read from the page as another user does not pass."""
    run_id = _paused(flows)
    theirs = gate_form(client.get("/", headers=_bearer(READER)).text, run_id)["csrf"]
    _signed_in(client)
    mine = gate_form(client.get("/").text, run_id)
    assert mine["csrf"] != theirs
    before = _stored(store_url, run_id)
    answer = _post_form(client, run_id, {**mine, "csrf": theirs, "approved": "true"})
    assert answer.status_code == 403 and _stored(store_url, run_id) == before


def test_the_page_decides_with_its_own_form(client: TestClient, flows: Any, store_url: str) -> None:
    """The form as the page renders it, sent from the page (Origin, or only Referer), decides once."""
    run_id = _paused(flows)
    _signed_in(client)
    fields = {**gate_form(client.get("/").text, run_id), "approved": "false", "comment": "not yet"}
    answer = client.post(f"/runs/{run_id}/decide", data=fields, headers={"Referer": f"{BASE}/"})
    assert answer.status_code == 200 and f"Rejected run {run_id}" in answer.text
    assert dnb.get_run(run_id, store=store_url).pending_interrupt is None


def test_a_page_form_from_one_server_decides_on_another_of_the_same_store(
    flows: Any, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Servers behind one proxy share the store's signing key, and so the forms' key: a form one showed
    is accepted by another (and after a restart). A server with another signing key refuses it."""
    monkeypatch.setenv("DURABLE_NB_SECRET", "one key for every server of this store")
    run_id = _paused(flows)
    with TestClient(_app(flows, store_url), base_url=BASE) as shown:
        _signed_in(shown)
        fields = {**gate_form(shown.get("/").text, run_id), "approved": "true", "comment": "from the other"}
    cookie = shown.cookies["durable_nb_token"]
    before = _stored(store_url, run_id)
    monkeypatch.setenv("DURABLE_NB_SECRET", "another key")
    with TestClient(_app(flows, store_url), base_url=BASE, cookies={"durable_nb_token": cookie}) as stranger:
        assert _post_form(stranger, run_id, fields).status_code == 403
    assert _stored(store_url, run_id) == before
    monkeypatch.setenv("DURABLE_NB_SECRET", "one key for every server of this store")
    with TestClient(_app(flows, store_url), base_url=BASE, cookies={"durable_nb_token": cookie}) as other:
        answer = _post_form(other, run_id, fields)
    assert answer.status_code == 200, answer.text
    assert dnb.get_run(run_id, store=store_url).pending_interrupt is None


def test_without_tokens_the_page_opens_its_own_session(open_client: TestClient, flows: Any, store_url: str) -> None:
    """Under --no-auth the page sets a session cookie of its own, so its forms still carry a token
    another page cannot know; a form without it decides nothing."""
    run_id = _paused(flows)
    page = open_client.get("/")
    assert "durable_nb_token" in page.cookies
    fields = {**gate_form(page.text, run_id), "approved": "true"}
    before = _stored(store_url, run_id)
    assert _post_form(open_client, run_id, {**fields, "csrf": "f" * 64}).status_code == 403
    assert _stored(store_url, run_id) == before
    assert _post_form(open_client, run_id, fields).status_code == 200
    assert dnb.get_run(run_id, store=store_url).pending_interrupt is None


# -- item 4: bodies: bounded, read only for known callers, not too deep -------------------------------


def test_a_body_over_the_limit_is_refused_whole_or_streamed(flows: Any, store_url: str) -> None:
    """max_body bounds every body: one announcing more is refused before it is read, one streamed in
    chunks is refused as it passes the limit (413 BodyTooLarge); nothing is started."""
    with TestClient(_app(flows, store_url, max_body=1000), base_url=BASE) as client:
        headers = {**_bearer(ADMIN), **JSON}
        padded = json.dumps({"input": {"who": "x" * 1000}})
        _refused(client.post("/api/workflows/gated/runs", content=padded, headers=headers), 413, "BodyTooLarge")

        def chunks() -> Iterator[bytes]:
            yield b'{"input": {"who": "'
            for _ in range(20):
                yield b"x" * 100
            yield b'"}}'

        _refused(client.post("/api/workflows/gated/runs", content=chunks(), headers=headers), 413, "BodyTooLarge")
        assert dnb.runs(store=store_url).empty
        small = client.post("/api/workflows/gated/runs", json={"input": {"who": "x" * 900}}, headers=headers)
        assert small.status_code == 202


@pytest.mark.parametrize("max_body", [0, -1, True, 1.5, "1000"])
def test_max_body_must_be_a_positive_number_of_bytes(flows: Any, store_url: str, max_body: Any) -> None:
    with pytest.raises(dnb.ConfigurationError, match="max_body"):
        _app(flows, store_url, max_body=max_body)


@pytest.mark.parametrize(
    ("value", "status", "error"),
    [
        pytest.param("[" * 65 + "]" * 65, 400, "JsonTooDeep", id="arrays-65"),
        pytest.param('{"a":' * 65 + "1" + "}" * 65, 400, "JsonTooDeep", id="objects-65"),
        pytest.param("[" * 100_000, 400, "JsonTooDeep", id="unclosed-100000"),
        pytest.param('"' + "[" * 200 + '"', 202, None, id="brackets-in-text"),
        pytest.param('"\\"' + "[" * 200 + '"', 202, None, id="brackets-after-an-escaped-quote"),
        pytest.param('["\\\\", ' + "[" * 65 + "]" * 66, 400, "JsonTooDeep", id="brackets-after-an-escaped-backslash"),
        pytest.param("[" * 62 + "]" * 62, 202, None, id="arrays-62-in-the-body-64"),
    ],
)
def test_json_nested_too_deep_is_refused_before_parsing(
    client: TestClient, store_url: str, value: str, status: int, error: str | None
) -> None:
    """Arrays and objects nested more than 64 deep are refused (400 JsonTooDeep) before the JSON parser
    sees them; brackets inside strings do not count."""
    body = '{"input": {"value": ' + value + "}}"
    answer = client.post("/api/workflows/gated/runs", content=body, headers={**_bearer(ADMIN), **JSON})
    assert answer.status_code == status, answer.text
    if error is not None:
        assert answer.json()["error"] == error
        assert dnb.runs(store=store_url).empty


# -- the real server: nothing is read before the token, memory stays flat ----------------------------


def _rss(pid: int) -> int:
    """The resident memory of process ``pid``, in bytes (from /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _send_large(url: str, path: str, headers: dict[str, str], size: int, chunked: bool = False) -> tuple[int, int]:
    """POST a ``size``-byte body (announced, or in chunks) as fast as the server takes it, stopping as
    soon as it answers; return the status and how many bytes went out."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}"
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", framing, *(f"{k}: {v}" for k, v in headers.items())]
    piece = b"[" + b"0," * 32_767 + b"0"
    pending, made, sent, answer = ("\r\n".join(lines) + "\r\n\r\n").encode(), 0, 0, b""
    with socket.create_connection((host, int(port))) as conn:
        conn.setblocking(False)
        while b"\r\n" not in answer:
            if not pending and made < size:
                chunk = piece[: size - made]
                made += len(chunk)
                pending = b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk
            readable, writable, _ = select.select([conn], [conn] if pending else [], [], 120)
            assert readable or writable, "the server neither answered nor took more of the body in 2 minutes"
            if readable:
                data = conn.recv(65536)
                assert data, f"the server closed the connection without answering, after {sent:,} bytes"
                answer += data
            elif writable:
                try:
                    done = conn.send(pending)
                except BlockingIOError:
                    continue
                pending, sent = pending[done:], sent + done
    return int(answer.split(b" ", 2)[1]), sent


@pytest.fixture
def server(tmp_path: Path, store_url: str) -> Iterator[Server]:
    (tmp_path / "service_flows.py").write_text(FLOWS)
    (tmp_path / "release").touch()
    running = Server(tmp_path, store_url, options=["--max-body", "100000"])
    yield running
    running.stop()


@pytest.mark.parametrize("token", [None, "x" * 24], ids=["no-token", "unknown-token"])
def test_a_large_body_without_a_known_token_is_refused_unread(server: Server, token: str | None) -> None:
    """A 200 MB body sent without a known token gets its 401 at once: the server reads none of it
    (it answers before the client could send more than the sockets hold) and its memory does not
    grow by anything near the body's size."""
    pid = server.process.pid
    before = _rss(pid)
    headers = {**JSON, **({"Authorization": f"Bearer {token}"} if token else {})}
    for chunked in (False, True):
        status, sent = _send_large(server.url, "/api/workflows/gated/runs", headers, 200 << 20, chunked)
        assert status == 401
        assert sent < 50 << 20, f"the client got to send {sent:,} bytes before the answer"
    assert _rss(pid) - before < 50 << 20, f"the server grew by {(_rss(pid) - before) >> 20} MB"


def test_a_large_body_with_a_token_is_refused_at_the_limit(server: Server, store_url: str) -> None:
    """With a known token, --max-body (here 100 kB) holds: a body announcing more is refused before it
    is read, a chunked one as it passes the limit (413 BodyTooLarge); JSON nested too deep is 400;
    nothing is started."""
    pid = server.process.pid
    before = _rss(pid)
    for chunked in (False, True):
        status, sent = _send_large(
            server.url, "/api/workflows/gated/runs", {**_bearer(ADMIN), **JSON}, 200 << 20, chunked
        )
        assert status == 413
        assert sent < 50 << 20
    assert _rss(pid) - before < 50 << 20
    nested = '{"input": {"x": ' + "[" * 5000 + "]" * 5000 + "}}"
    deep = httpx.post(f"{server.url}/api/workflows/gated/runs", content=nested, headers={**_bearer(ADMIN), **JSON})
    assert deep.status_code == 400 and deep.json()["error"] == "JsonTooDeep"
    assert dnb.runs(store=store_url).empty


def test_serve_says_where_it_listens_and_how_to_sign_in(server: Server) -> None:
    """Item 28: `durable-nb serve` prints its address, the approvals page and how to sign in."""
    first, page, api, hosts = server.announced
    assert re.fullmatch(r"durable-nb serve: listening on http://127\.0\.0\.1:\d+", first)
    assert page == f"  approvals page: {server.url}/ (sign in once with /?token=YOUR_TOKEN; a cookie keeps it)"
    assert api.startswith(f"  API: {server.url}/api/") and "/openapi.json" in api
    assert hosts == "  answers requests for host localhost, 127.0.0.1, [::1] (add names with --allowed-host)"


def test_the_real_server_refuses_a_foreign_host(server: Server) -> None:
    """DNS rebinding against the real server: `curl -H 'Host: attacker.example'` gets 400."""
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port))) as conn:
        conn.sendall(
            f"GET /api/runs HTTP/1.1\r\nHost: attacker.example:{port}\r\nAuthorization: Bearer {ADMIN}\r\n\r\n".encode()
        )
        answer = b""
        while b"}" not in answer:
            data = conn.recv(65536)
            assert data
            answer += data
    assert answer.startswith(b"HTTP/1.1 400 ") and b'"HostNotAllowed"' in answer
