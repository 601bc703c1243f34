"""``GET /health``: whether a server can read its store, for load balancers and container checks.

The app runs in process on a real store of each backend; a store that stops answering is a failure
injected into its one read.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from servicekit import BASE, TOKENS

from durable_nb.service.app import create_app
from durable_nb.service.auth import Auth, load_tokens
from durable_nb.store import bulk_ops


@pytest.fixture
def client(store_url: str) -> Iterator[TestClient]:
    auth = Auth(load_tokens(environ={"DURABLE_NB_TOKENS": TOKENS}))
    with TestClient(create_app([], store=store_url, auth=auth, recover_every=3600), base_url=BASE) as served:
        yield served


def _driver_failure(store_url: str) -> Exception:
    if store_url.startswith("sqlite"):
        return sqlite3.OperationalError("disk I/O error")
    import psycopg

    return psycopg.errors.DataCorrupted("could not read block 7")  # not retried, as a lost connection is


def test_a_server_that_reads_its_store_is_healthy_without_a_token(client: TestClient) -> None:
    answer = client.get("/health")
    assert answer.status_code == 200
    assert answer.json()["status"] == "ok"
    assert answer.headers["Cache-Control"] == "no-store"
    assert answer.headers["X-Frame-Options"] == "DENY"
    assert "/health" in client.get("/openapi.json").json()["paths"]


def test_a_store_that_does_not_answer_makes_the_server_unhealthy_and_says_no_more(
    client: TestClient, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    failure = _driver_failure(store_url)
    real = bulk_ops.ping

    def fails(conn: Any) -> None:
        raise failure

    monkeypatch.setattr(bulk_ops, "ping", fails)
    answer = client.get("/health")
    assert answer.status_code == 503
    assert answer.json()["status"] == "unavailable"
    # Open to anyone: it names neither the store nor the driver's words.
    for secret in (store_url, "block 7", "disk I/O"):
        assert secret not in answer.text
    monkeypatch.setattr(bulk_ops, "ping", real)
    assert client.get("/health").status_code == 200  # the store answers again: so does the check


@pytest.mark.backends("sqlite")
def test_health_keeps_the_servers_protections(client: TestClient) -> None:
    assert client.get("/health", headers={"Host": "evil.example"}).status_code == 400
    assert client.post("/health").status_code in (403, 405)  # the guard refuses a bare POST before routing
    assert client.get("/health", headers={"Authorization": "Bearer " + "x" * 24}).status_code == 200  # not a gate


@pytest.mark.backends("sqlite")
def test_a_store_whose_tables_are_gone_is_unhealthy(client: TestClient, store_url: str) -> None:
    """A real fault: the database answers but no longer holds the store (here its runs table was dropped)."""
    assert client.get("/health").status_code == 200
    path = store_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as other:
        other.execute("PRAGMA foreign_keys = OFF")
        other.execute("DROP TABLE runs")
    assert client.get("/health").status_code == 503
