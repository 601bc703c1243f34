"""The service's metrics at /metrics (issue 33): Prometheus's text format behind a read token.

The store's figures (runs by status, gates waiting and their wait, node durations) count the
work of every process on the store, so runs made by this test process show beside the server's;
the server's own counters (commits, takeovers, store errors, requests) count only its work. A
real ``durable-nb serve`` answers the figures on both backends; the app in process (Starlette's
test client) is where a failure is injected and the statements of a scrape are counted.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import durable_nb as dnb
from durable_nb.service.auth import Auth, load_tokens
from durable_nb.store.rows import RUN_COLUMNS
from durable_nb.store.schedules import SCHEDULE_COLUMNS

pytest.importorskip("fastapi", reason="the service needs the serve extra (fastapi, uvicorn)")
pytest.importorskip("prometheus_client", reason="the metrics need the serve extra (prometheus_client)")

import httpx
from conftest import execute_sql
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from servicekit import ADMIN, BASE, DECIDER, READER, TOKENS, load_flows, stranded_in_work

from durable_nb.service.app import create_app
from durable_nb.store.figures import DURATIONS_SINCE

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _parse(text: str) -> Samples:
    """Every sample of an exposition, by name and labels (the histogram's ``le`` included)."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _one(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def _runs(samples: Samples) -> dict[str, float]:
    return {dict(labels)["status"]: value for (name, labels), value in samples.items() if name == "durable_nb_runs"}


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _scrape(url: str, token: str = READER) -> Samples:
    answer = httpx.get(f"{url}/metrics", headers=_bearer(token), timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    return _parse(answer.text)


def _work_of_another_process(store_url: str) -> None:
    """One completed and one failed run, made here, not by the server."""
    fine = dnb.Workflow("elsewhere", store=store_url)

    @fine.node
    def add(state: dict[str, Any]) -> dict[str, Any]:
        return {"x": 1}

    @fine.node(after="add")
    def double(state: dict[str, Any]) -> dict[str, Any]:
        return {"x": state["x"] * 2}

    broken = dnb.Workflow("broken", store=store_url)

    @broken.node
    def boom(state: dict[str, Any]) -> dict[str, Any]:
        raise ValueError("no")

    assert fine.run({}).status == "completed"
    try:
        failed = broken.run({})
    except dnb.NodeFailed:
        pass
    else:
        assert failed.status == "failed"


# -- a real server ----------------------------------------------------------------------------


def test_runs_gates_durations_and_commits_of_every_process(serving: Any, store_url: str) -> None:
    server = serving()
    client = server.client
    before = _scrape(server.url)
    assert _one(before, "durable_nb_commits_total") == 0
    assert _runs(before) == dict.fromkeys(["pending", "running", "paused", "failed", "cancelled", "completed"], 0)
    assert _one(before, "durable_nb_gates_waiting") == 0
    assert _one(before, "durable_nb_gate_oldest_wait_seconds") == 0

    waiting = client.run("gated", {"who": "kim"})["id"]
    approved = client.run("gated", {"who": "lee"})["id"]
    cancelled = client.run("gated", {"who": "max"})["id"]
    for run_id in (waiting, approved, cancelled):
        assert client.wait(run_id, until=("paused",))["status"] == "paused"
    dnb.Client(server.url, token=DECIDER).approve(approved)
    assert client.wait(approved)["status"] == "completed"
    client.cancel(cancelled)
    _work_of_another_process(store_url)

    after = _scrape(server.url)
    assert _runs(after) == {"pending": 0, "running": 0, "paused": 1, "failed": 1, "cancelled": 1, "completed": 2}
    assert _one(after, "durable_nb_gates_waiting") == 1
    assert _one(after, "durable_nb_gate_oldest_wait_seconds") > 0
    assert _one(after, "durable_nb_gates_waiting_seconds") == _one(after, "durable_nb_gate_oldest_wait_seconds")
    # Each start, pause, decision and node of the server's runs is a commit; the other process's are not its.
    assert _one(after, "durable_nb_commits_total") >= 8
    assert _one(after, "durable_nb_recovery_takeovers_total") == 0
    assert _one(after, "durable_nb_store_errors_total") == 0
    # Durations: every node and gate any process ended since the server started (the store has no other).
    finished = _one(after, "durable_nb_node_duration_seconds_count")
    assert finished == execute_sql(store_url, "SELECT COUNT(*) FROM checkpoints WHERE duration IS NOT NULL")[0][0]
    assert finished >= 7  # the server's three drafts and one publish, this process's three nodes
    assert _one(after, "durable_nb_node_duration_seconds_bucket", le="+Inf") == finished
    assert _one(after, "durable_nb_http_requests_total", method="POST", code="202") == 4  # 3 starts, 1 decision

    # Nothing new: a scrape counts no duration twice, and the counters stand.
    again = _scrape(server.url)
    assert _one(again, "durable_nb_node_duration_seconds_count") == finished
    assert _one(again, "durable_nb_commits_total") == _one(after, "durable_nb_commits_total")


@pytest.mark.backends("sqlite")  # a real server killed and started again: the figures above cover PostgreSQL
def test_a_recovery_takeover_is_counted(serving: Any, tmp_path: Path) -> None:
    _, run_id = stranded_in_work(serving, tmp_path)
    second = serving()
    assert second.client.wait(run_id, timeout=120)["status"] == "completed"
    samples = _scrape(second.url)
    assert _one(samples, "durable_nb_recovery_takeovers_total") == 1
    assert _one(samples, "durable_nb_commits_total") >= 2  # the takeover, the node, the end


# -- the app in process -----------------------------------------------------------------------


@pytest.fixture
def flows(tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    return load_flows(tmp_path, store_url, monkeypatch)


def _app(flows: Any, store_url: str) -> Any:
    auth = Auth(load_tokens(environ={"DURABLE_NB_TOKENS": TOKENS}))
    return create_app([flows.gated, flows.slow], store=store_url, auth=auth, recover_every=3600)


@pytest.fixture
def app_client(flows: Any, store_url: str) -> Iterator[TestClient]:
    with TestClient(_app(flows, store_url), base_url=BASE) as client:
        yield client


def _get(client: TestClient, token: str = READER) -> Samples:
    answer = client.get("/metrics", headers=_bearer(token))
    assert answer.status_code == 200, answer.text
    return _parse(answer.text)


@pytest.mark.backends("sqlite")
def test_metrics_need_a_read_token_and_keep_the_protections(app_client: TestClient) -> None:
    assert app_client.get("/metrics").status_code == 401
    refused = app_client.get("/metrics", headers=_bearer("x" * 24))
    assert refused.status_code == 401 and refused.json()["error"] == "Unauthorized"
    assert refused.headers["X-Frame-Options"] == "DENY"
    for token in (READER, DECIDER, ADMIN):  # every scope includes read
        assert app_client.get("/metrics", headers=_bearer(token)).status_code == 200
    answer = app_client.get("/metrics", headers=_bearer(READER))
    assert answer.headers["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in answer.headers["Content-Security-Policy"]
    assert answer.headers["Cache-Control"] == "no-store"
    foreign = app_client.get("/metrics", headers={**_bearer(READER), "Host": "evil.example"})
    assert foreign.status_code == 400
    assert "/metrics" in app_client.get("/openapi.json").json()["paths"]
    # OpenMetrics for a scraper that asks for it.
    asked = app_client.get("/metrics", headers={**_bearer(READER), "Accept": "application/openmetrics-text"})
    assert asked.headers["content-type"].startswith("application/openmetrics-text")
    assert asked.text.rstrip().endswith("# EOF")


def test_a_store_error_is_counted(app_client: TestClient, store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = dnb.connect(store_url)
    if store_url.startswith("sqlite"):
        failure: Exception = sqlite3.OperationalError("disk I/O error")
    else:
        import psycopg

        failure = psycopg.errors.DataCorrupted("could not read block 7")  # not retried, as a lost connection is
    real = store._sql._list_runs  # type: ignore[attr-defined]
    calls = {"n": 0}

    def fails_once(*args: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise failure
        return real(*args)

    monkeypatch.setattr(store._sql, "_list_runs", fails_once)  # type: ignore[attr-defined]
    app_client.get("/api/runs", headers=_bearer(READER))  # the first list fails: this or the recovery's
    app_client.get("/api/runs", headers=_bearer(READER))
    assert calls["n"] >= 2
    assert _one(_get(app_client), "durable_nb_store_errors_total") == 1


@pytest.mark.backends("sqlite")
def test_two_apps_in_one_process_count_apart(flows: Any, store_url: str) -> None:
    with (
        TestClient(_app(flows, store_url), base_url=BASE) as first,
        TestClient(_app(flows, store_url), base_url=BASE) as second,
    ):
        started = first.post("/api/workflows/gated/runs", json={"input": {}}, headers=_bearer(ADMIN))
        assert started.status_code == 202
        assert _one(_get(first), "durable_nb_http_requests_total", method="POST", code="202") == 1
        assert ("durable_nb_http_requests_total", (("code", "202"), ("method", "POST"))) not in _get(second)


@pytest.mark.backends("sqlite")
def test_a_scrape_costs_four_indexed_queries_whatever_the_store_holds(app_client: TestClient, store_url: str) -> None:
    store = dnb.connect(store_url)
    filler = dnb.Workflow("filler", store=store_url)

    @filler.node
    def one(state: dict[str, Any]) -> dict[str, Any]:
        return {"n": state.get("n", 0) + 1}

    @filler.node(after="one")
    def two(state: dict[str, Any]) -> dict[str, Any]:
        return {"n": state["n"] + 1}

    def statements_of_a_scrape() -> list[str]:
        seen: list[str] = []
        store._conn.set_trace_callback(seen.append)  # type: ignore[attr-defined]
        try:
            _get(app_client)
        finally:
            store._conn.set_trace_callback(None)  # type: ignore[attr-defined]
        # The server's scheduler and recovery share the connection and may poll meanwhile for due
        # schedules and runs to take over (whole rows, which a scrape never reads): not the scrape's.
        pollers = (f"SELECT {SCHEDULE_COLUMNS} ", f"SELECT {RUN_COLUMNS} ")
        return [sql for sql in seen if not sql.startswith(pollers)]

    _get(app_client)  # the connection is open
    small = statements_of_a_scrape()
    for n in range(60):
        filler.run({"n": n})
    large = statements_of_a_scrape()
    assert len(small) == len(large) == 4, large
    assert _runs(_get(app_client))["completed"] == 60
    # The durations are read through the index of checkpoints by time, never by scanning the history.
    with sqlite3.connect(store_url.removeprefix("sqlite:///")) as conn:
        plan = " ".join(
            str(row[-1]) for row in conn.execute("EXPLAIN QUERY PLAN " + DURATIONS_SINCE.format(p="?"), (0,))
        )
    assert "USING INDEX checkpoints_by_time" in plan and "SCAN checkpoints" not in plan
