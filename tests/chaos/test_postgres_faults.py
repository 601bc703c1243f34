"""Chaos on PostgreSQL (issue 15): the server terminates the store's connections, once or repeatedly.

A node of the running flow has the server terminate every connection of the store (as an
operator's ``pg_terminate_backend`` or a failover would). Once, the run must simply go on:
the pool replaces dead connections and a commit cut off mid-flight is found landed or
written again. Repeatedly, for seconds, the run may also stop, but only with a typed
``StoreFailed`` that says how often it tried, and another process then resumes it. Either
way every committed node keeps its value and never runs again.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from chaoskit import ChaosFlow, CuttableProxy
from conftest import _drop_schema, _postgres_url

import durable_nb as dnb
from durable_nb.store import disconnect

NODES = 10
SIZE = 2000

KILLER = """
import sys, time, psycopg
base, app, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
end = time.monotonic() + seconds
with psycopg.connect(base, autocommit=True) as conn:
    while True:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (app,)
        )
        if time.monotonic() >= end:
            break
        time.sleep(0.02)
"""


@pytest.fixture
def postgres_store() -> Iterator[tuple[str, str]]:
    """A store in a schema of its own: its URL and its connections' application name."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    url = _postgres_url(schema)
    yield url, f"durable-nb:{schema}"
    disconnect(url)
    _drop_schema(schema)


def _killer(tmp_path: Path, url: str, app: str, seconds: float) -> str:
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    base = url.split("?", 1)[0]
    return f"{sys.executable} {script} '{base}' '{app}' {seconds}"


def _check_nothing_lost(flow: ChaosFlow, url: str, run_id: str) -> None:
    counts = flow.executions()
    assert sorted(counts) == list(range(NODES))
    assert sum(n - 1 for n in counts.values()) <= 1, counts
    state = dnb.get_run(run_id, store=url).state
    assert all(state[f"v{i:02d}"] == flow.expected_value(i, SIZE) for i in range(NODES))


def test_connections_terminated_once_the_run_goes_on(tmp_path: Path, postgres_store: tuple[str, str]) -> None:
    url, app = postgres_store
    flow = ChaosFlow(tmp_path, url, NODES, fault_at=4, fault=_killer(tmp_path, url, app, 0), size=SIZE)
    report = flow.run_to_end("run")
    assert report.get("status") == "completed", report
    _check_nothing_lost(flow, url, report["run_id"])


def test_connections_terminated_repeatedly_settle_or_finish(tmp_path: Path, postgres_store: tuple[str, str]) -> None:
    url, app = postgres_store
    # The killer runs in the background for 3 s, terminating the store's connections every 20 ms.
    fault = _killer(tmp_path, url, app, 3) + " &"
    flow = ChaosFlow(tmp_path, url, NODES, fault_at=3, fault=fault, size=SIZE)
    first = flow.start("run")
    if "raised" in first:
        assert first["raised"] == "StoreFailed", first
        assert "tried" in first["message"] or "connection" in first["message"].lower(), first
        run_id = first["run_id"]
        # Resumed by another process while the first still lives (once the killer has stopped).
        for _ in range(20):
            resumed = flow.run_to_end("resume", run_id)
            if resumed.get("status") == "completed":
                break
            # Still inside the killer's window: a typed failure, and the run stays resumable.
            assert resumed.get("raised") in ("StoreFailed", "StoreUnavailable"), resumed
        assert resumed.get("status") == "completed", resumed
    else:
        assert first["status"] == "completed", first
        run_id = first["run_id"]
    assert flow.release() == [0]
    _check_nothing_lost(flow, url, run_id)


def test_server_unreachable_mid_run_gives_the_run_up(tmp_path: Path, postgres_store: tuple[str, str]) -> None:
    url, _ = postgres_store
    dnb.connect(url)  # creates the schema, directly
    flag = tmp_path / "cut"
    parts = urlsplit(url)
    proxy = CuttableProxy((parts.hostname or "127.0.0.1", parts.port or 5432), flag)
    try:
        # The running process reaches the server through the proxy, and waits 2 s for a connection.
        proxied = urlunsplit(
            (parts.scheme, f"{parts.username}@127.0.0.1:{proxy.port}", parts.path, f"{parts.query}&pool_timeout=2", "")
        )
        flow = ChaosFlow(tmp_path, proxied, NODES, fault_at=4, fault=f"touch {flag}", size=SIZE)
        first = flow.start("run")
        assert first["raised"] == "StoreFailed", first
        assert "reachable" in first["message"] or "tried" in first["message"], first
        # The server never heard of the failure: the run still names the live process as owner …
        run_id = str(dnb.runs("chaos", store=url).run_id.iloc[0])
        assert dnb.get_run(run_id, store=url).status == "running"
        # … which gave it up, so another process (reaching the server directly) resumes it.
        direct = ChaosFlow(tmp_path, url, NODES, fault_at=-1, fault="", size=SIZE)
        resumed = direct.run_to_end("resume", run_id)
        assert resumed.get("status") == "completed", resumed
        flag.unlink()
        assert flow.release() == [0]
        _check_nothing_lost(direct, url, run_id)
    finally:
        proxy.close()
