"""The service (issue 17): the HTTP API, its tokens, the Python client, and recovery on start.

Endpoints are exercised through the real app (Starlette's test client runs its lifespan);
the two-minute durability test runs ``durable-nb serve`` as a real subprocess, kills it with
SIGKILL and starts it again: a paused run stays paused and completes once approved over HTTP,
and a run killed mid-node is continued by the restarted server on its own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import durable_nb as dnb
from durable_nb.model import format_seconds
from durable_nb.service.auth import Auth, load_tokens

pytest.importorskip("fastapi", reason="the service needs the serve extra (fastapi, uvicorn)")

from fastapi.testclient import TestClient
from servicekit import ADMIN, BASE, DECIDER, FLOWS, READER, TOKENS, stranded_in_work

from durable_nb.service.app import create_app


def _headers(token: str) -> dict[str, str]:
    # JSON on every request: the API refuses a state-changing one of any other type (415).
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


@pytest.fixture
def app_client(tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("SERVICE_STORE", store_url)
    monkeypatch.setenv("SERVICE_SIDE", str(tmp_path / "side.txt"))
    (tmp_path / "release").touch()
    module = tmp_path / "service_flows.py"
    module.write_text(FLOWS)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    flows = importlib.import_module("service_flows")
    importlib.reload(flows)
    auth = Auth(load_tokens(environ={"DURABLE_NB_TOKENS": TOKENS}))
    app = create_app([flows.gated, flows.slow], store=store_url, auth=auth, recover_every=3600)
    with TestClient(app, base_url=BASE) as client:
        yield client


def _wait(client: TestClient, run_id: str, status: str) -> dict[str, Any]:
    for _ in range(400):
        found = client.get(f"/api/runs/{run_id}", headers=_headers(READER)).json()
        if found["status"] == status:
            return found
        time.sleep(0.025)
    raise AssertionError(f"run {run_id} is {found['status']}, not {status}")


def test_start_decide_and_watch_a_run(app_client: TestClient, store_url: str) -> None:
    started = app_client.post(
        "/api/workflows/gated/runs", json={"input": {"who": "ana"}}, headers={**_headers(ADMIN), "Idempotency-Key": "k"}
    )
    assert started.status_code == 202 and started.json()["status"] == "pending"
    run_id = started.json()["id"]
    again = app_client.post(
        "/api/workflows/gated/runs", json={"input": {"who": "ana"}}, headers={**_headers(ADMIN), "Idempotency-Key": "k"}
    )
    assert again.json()["id"] == run_id  # the key returns the first run, not a second
    other = app_client.post(
        "/api/workflows/gated/runs", json={"input": {"who": "bo"}}, headers={**_headers(ADMIN), "Idempotency-Key": "k"}
    )
    assert other.status_code == 422 and other.json()["error"] == "IdempotencyKeyReused", other.text
    assert run_id in other.json()["message"]
    paused = _wait(app_client, run_id, "paused")
    assert paused["node_counts"]["suspended"] == 1 and paused["node_counts"]["ok"] == 1
    decided = app_client.post(
        f"/api/runs/{run_id}/approve", json={"approved": True, "comment": "ok"}, headers=_headers(DECIDER)
    )
    assert decided.status_code == 202
    late = app_client.post(f"/api/runs/{run_id}/approve", json={"approved": True}, headers=_headers(DECIDER))
    assert late.status_code == 409 and late.json()["error"] == "AlreadyResumed"
    _wait(app_client, run_id, "completed")
    assert dnb.get_run(run_id, store=store_url).state == {
        "who": "ana",
        "draft": "hello ana",
        "published": True,
        "by": "ana",
    }
    history = app_client.get(f"/api/runs/{run_id}/history", headers=_headers(READER)).json()
    assert [row["step"] for row in history][-2:] == ["after:publish", "run_end"]
    events = app_client.get(f"/api/runs/{run_id}/events", params={"after": 0}, headers=_headers(READER)).json()
    assert events[0]["type"] == "run_started" and [e["seq"] for e in events] == sorted(e["seq"] for e in events)
    listed = app_client.get(
        "/api/runs", params={"name": "gated", "status": "completed"}, headers=_headers(READER)
    ).json()
    assert [r["run_id"] for r in listed] == [run_id]


@pytest.mark.parametrize(
    ("method", "path", "body", "token", "status", "error"),
    [
        pytest.param("POST", "/api/workflows/gated/runs", {}, None, 401, "Unauthorized", id="no-token"),
        pytest.param("POST", "/api/workflows/gated/runs", {}, "x" * 24, 401, "Unauthorized", id="unknown-token"),
        pytest.param("POST", "/api/workflows/gated/runs", {}, DECIDER, 403, "Forbidden", id="decider-cannot-start"),
        pytest.param(
            "POST", "/api/runs/{run}/approve", {"approved": True}, READER, 403, "Forbidden", id="reader-cannot-decide"
        ),
        pytest.param("GET", "/api/runs/{run}", None, None, 401, "Unauthorized", id="no-token-read"),
        pytest.param("GET", "/api/runs/0192-nope", None, READER, 404, "RunNotFound", id="unknown-run"),
        pytest.param("POST", "/api/workflows/nope/runs", {}, ADMIN, 404, "WorkflowNotFound", id="unknown-workflow"),
        pytest.param(
            "POST", "/api/workflows/gated/runs", {"input": 5}, ADMIN, 422, "InvalidRequest", id="input-not-object"
        ),
        pytest.param(
            "POST",
            "/api/runs/{run}/approve",
            {"approved": "yes"},
            DECIDER,
            422,
            "InvalidRequest",
            id="approved-not-bool",
        ),
        pytest.param(
            "POST",
            "/api/workflows/gated/runs",
            {"input": {"__loop_x": 1}},
            ADMIN,
            400,
            "InvalidState",
            id="reserved-input",
        ),
        pytest.param("POST", "/api/runs/{run}/resume", None, ADMIN, 400, "NotResumable", id="resume-paused"),
        pytest.param(
            "POST",
            "/api/runs/{run}/fork",
            {"checkpoint_id": "nope"},
            ADMIN,
            404,
            "CheckpointNotFound",
            id="fork-unknown-checkpoint",
        ),
        pytest.param("GET", "/api/runs?status=bogus", None, READER, 422, "InvalidRequest", id="bad-status-filter"),
        pytest.param(
            "POST", "/api/runs/{run}/approve", {"node": "draft"}, DECIDER, 404, "UnknownGate", id="node-without-gate"
        ),
        pytest.param(
            "POST", "/api/runs/{run}/approve", {"node": "nowhere"}, DECIDER, 404, "UnknownGate", id="unknown-node"
        ),
        pytest.param(
            "GET",
            "/api/runs/{run}/events?after=99999999999999999999999",
            None,
            READER,
            400,
            "InvalidInput",
            id="after-huge",
        ),
        pytest.param(
            "GET",
            "/api/runs/{run}/events?after=9223372036854775808",
            None,
            READER,
            400,
            "InvalidInput",
            id="after-2-63",
        ),
        pytest.param("GET", "/api/runs/{run}/events?after=-1", None, READER, 400, "InvalidInput", id="after-negative"),
    ],
)
@pytest.mark.backends("sqlite")  # the service's PostgreSQL cases are the runs above and the server tests below
def test_refusals_are_typed_and_change_nothing(
    app_client: TestClient, method: str, path: str, body: Any, token: str | None, status: int, error: str
) -> None:
    run_id = app_client.post("/api/workflows/gated/runs", json={"input": {}}, headers=_headers(ADMIN)).json()["id"]
    before = _wait(app_client, run_id, "paused")
    headers = _headers(token) if token else {}
    response = app_client.request(method, path.format(run=run_id), json=body, headers=headers)
    assert response.status_code == status, response.text
    assert response.json()["error"] == error and response.json()["message"]
    assert app_client.get(f"/api/runs/{run_id}", headers=_headers(READER)).json() == before
    if "resume" in path:
        assert "approve" in response.json()["message"]


def test_cancel_and_fork(app_client: TestClient, store_url: str) -> None:
    run_id = app_client.post("/api/workflows/gated/runs", json={"input": {}}, headers=_headers(ADMIN)).json()["id"]
    _wait(app_client, run_id, "paused")
    forked = app_client.post(f"/api/runs/{run_id}/fork", json={"state": {"who": "bo"}}, headers=_headers(ADMIN))
    assert forked.status_code == 202
    fork_id = forked.json()["id"]
    _wait(app_client, fork_id, "paused")
    assert app_client.post(f"/api/runs/{run_id}/cancel", headers=_headers(ADMIN)).json()["status"] == "cancelled"
    finished = app_client.post(f"/api/runs/{run_id}/cancel", headers=_headers(ADMIN))
    assert finished.status_code == 400 and finished.json()["error"] == "NotCancellable"
    resumed = app_client.post(f"/api/runs/{run_id}/resume", headers=_headers(ADMIN))
    assert resumed.status_code == 202
    _wait(app_client, run_id, "paused")  # cancelled at its gate, resumed: it asks again
    assert dnb.get_run(fork_id, store=store_url).state["draft"] == "hello world"


@pytest.mark.backends("sqlite")  # the service's PostgreSQL cases are the runs above and the server tests below
def test_openapi_document_lists_every_endpoint(app_client: TestClient) -> None:
    paths = set(app_client.get("/openapi.json").json()["paths"])
    assert {
        "/api/workflows/{name}/runs",
        "/api/runs",
        "/api/runs/{run_id}",
        "/api/runs/{run_id}/history",
        "/api/runs/{run_id}/events",
        "/api/runs/{run_id}/resume",
        "/api/runs/{run_id}/approve",
        "/api/runs/{run_id}/cancel",
        "/api/runs/{run_id}/fork",
    } <= paths


# -- the real server, killed and started again --------------------------------------------------


def test_a_paused_run_survives_a_killed_server_and_completes_when_approved(serving: Any, store_url: str) -> None:
    first = serving()
    run_id = first.client.run("gated", {"who": "kim"})["id"]
    assert first.client.wait(run_id)["status"] == "paused"
    first.kill()
    second = serving()
    assert second.client.get(run_id)["status"] == "paused"
    decider = dnb.Client(second.client.url, token=DECIDER)
    assert decider.approve(run_id, comment="go")["approved"] is True
    with pytest.raises(dnb.AlreadyResumed):
        decider.approve(run_id)
    assert second.client.wait(run_id, until=("completed", "failed"))["status"] == "completed"
    assert dnb.get_run(run_id, store=store_url).state["by"] == "ana"


@pytest.mark.backends("sqlite")  # a real server: its PostgreSQL case is the paused run above
def test_a_run_killed_mid_node_is_continued_by_the_restarted_server(
    serving: Any, tmp_path: Path, store_url: str
) -> None:
    side, run_id = stranded_in_work(serving, tmp_path)
    second = serving()
    # Nobody asks: the server's recovery on start takes the stranded run over.
    assert second.client.wait(run_id, until=("completed", "failed"), timeout=120)["status"] == "completed"
    assert side.read_text().split() == ["first", "work", "work"]  # only the node in flight ran again
    assert dnb.get_run(run_id, store=store_url).state == {"one": 1, "two": 2}


def test_two_servers_on_one_store_continue_a_stranded_run_once(serving: Any, tmp_path: Path, store_url: str) -> None:
    side, run_id = stranded_in_work(serving, tmp_path)
    # Two servers start at once; both look for stranded runs every second.
    second, third = serving(), serving()
    assert second.client.wait(run_id, until=("completed", "failed"), timeout=120)["status"] == "completed"
    time.sleep(2.5)  # both have looked again since: nobody continues a finished run
    assert side.read_text().split() == ["first", "work", "work"]
    assert third.client.get(run_id)["status"] == "completed"


@pytest.mark.backends("sqlite")  # a real server: its PostgreSQL case is the paused run above
def test_the_client_has_async_twins(serving: Any) -> None:
    import asyncio

    server = serving()

    async def go() -> dict[str, Any]:
        started = await server.client.arun("gated", {"who": "async"}, idempotency_key="a-1")
        again = await server.client.arun("gated", {"who": "async"}, idempotency_key="a-1")
        assert again["id"] == started["id"]
        with pytest.raises(dnb.IdempotencyKeyReused):
            await server.client.arun("gated", {}, idempotency_key="a-1")
        paused = await server.client.await_run(started["id"])
        assert paused["status"] == "paused"
        history = await server.client.ahistory(started["id"])
        assert history[0]["step"].startswith("after:")
        with pytest.raises(dnb.RunNotFound):
            await server.client.aget("0192-nope")
        return paused

    asyncio.run(go())


@pytest.mark.backends("sqlite")  # the service's PostgreSQL cases are the runs above and the server tests below
def test_the_run_page_reads_like_the_notebook_views(app_client: TestClient, store_url: str) -> None:
    """Issue 27: the approvals page's run view shows times local to the second (the UTC instant on
    hover) and durations as the notebook views do, and calls a gate's checkpoint what it is."""
    import re

    run_id = app_client.post("/api/workflows/gated/runs", json={"input": {}}, headers=_headers(ADMIN)).json()["id"]
    _wait(app_client, run_id, "paused")

    def cells() -> list[list[str]]:
        page = app_client.get(f"/runs/{run_id}", headers=_headers(READER)).text
        rows = re.findall(r"<tr><td>(.*?)</td></tr>", page)
        return [[re.sub(r"<[^>]+>", "", cell) for cell in row.split("</td><td>")] for row in rows]

    assert [row[1:3] for row in cells()] == [["after:draft", "ok"], ["gate:publish", "waiting for a decision"]]
    app_client.post(f"/api/runs/{run_id}/approve", json={"approved": False}, headers=_headers(DECIDER))
    _wait(app_client, run_id, "completed")
    rows = cells()
    assert [row[1:3] for row in rows] == [
        ["after:draft", "ok"],
        ["gate:publish", "decided"],
        ["approved:publish", "decision recorded"],
        ["after:publish", "ok"],
        ["run_end", "completed"],
    ]
    history = dnb.history(run_id, store=store_url)
    for row, (at, took) in zip(rows, zip(history["created_at"], history["duration"], strict=True), strict=True):
        assert row[3] == f"{at.floor('s').to_pydatetime().astimezone():%Y-%m-%d %H:%M:%S}"  # local, to the second
        assert row[4] == ("" if pd.isna(took) else format_seconds(took.total_seconds(), compound=True))
    assert re.fullmatch(r"[\d.]+ (ms|s)", rows[0][4])  # 0.437 ms, not 0.000437
    body = app_client.get(f"/runs/{run_id}", headers=_headers(READER)).text.split("</head>", 1)[1]
    assert "interrupted" not in re.sub(r"<[^>]+>", "", body)
