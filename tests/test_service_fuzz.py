"""Fuzzing every endpoint from the OpenAPI document (issue 17): no 500s, and a refused request changes no run.

Schemathesis (Hypothesis underneath) generates requests from the service's own schema, valid and
malformed, with an admin token so that nothing stops at authentication. A paused run and a
completed one sit in the store; after every request that was refused (4xx), both are exactly as
they were.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import pytest

import durable_nb as dnb

schemathesis = pytest.importorskip("schemathesis", reason="fuzzing needs schemathesis (the dev extra)")
pytest.importorskip("fastapi", reason="the service needs the serve extra")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from servicekit import ADMIN, FLOWS, TOKENS  # noqa: E402

from durable_nb.service.app import create_app  # noqa: E402
from durable_nb.service.auth import Auth, load_tokens  # noqa: E402

pytestmark = pytest.mark.sqlite_only


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("fuzz")
    url = f"sqlite:///{folder}/fuzz.db"
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("SERVICE_STORE", url)
    monkeypatch.setenv("SERVICE_SIDE", str(folder / "side.txt"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(folder / "config"))
    monkeypatch.delenv("DURABLE_NB_SECRET", raising=False)
    (folder / "release").touch()
    (folder / "service_flows.py").write_text(FLOWS)
    monkeypatch.syspath_prepend(str(folder))
    flows = importlib.reload(importlib.import_module("service_flows"))
    paused = flows.gated.run({})
    done = flows.slow.run({})
    app = create_app(
        [flows.gated, flows.slow],
        store=url,
        auth=Auth(load_tokens(environ={"DURABLE_NB_TOKENS": TOKENS})),
        recover_every=3600,
        allowed_host=["testserver"],  # the host schemathesis's ASGI client names
    )
    yield {"app": app, "url": url, "paused": paused.id, "done": done.id}
    monkeypatch.undo()


def _snapshot(world: dict[str, Any], touched: set[str]) -> list[tuple[str, int, str]]:
    rows = []
    for run_id in (world["paused"], world["done"]):
        if run_id in touched:
            continue
        run = dnb.get_run(run_id, store=world["url"])
        rows.append((run.status, len(dnb.history(run_id, store=world["url"])), str(run.pending_interrupt)))
    return rows


def _operations(world: dict[str, Any]) -> list[Any]:
    schema = schemathesis.openapi.from_asgi("/openapi.json", world["app"])
    return [result.ok() for result in schema.get_all_operations()]


def test_no_500_and_refusals_change_nothing(world: dict[str, Any]) -> None:
    operations = _operations(world)
    assert len(operations) >= 10
    touched: set[str] = set()

    @given(st.data())
    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    def one_request(data: st.DataObject) -> None:
        operation = data.draw(st.sampled_from(operations))
        case = data.draw(operation.as_strategy())
        # Often aim at the real runs, so that requests reach them and not only unknown ids.
        if "run_id" in (case.path_parameters or {}) and data.draw(st.booleans()):
            case.path_parameters["run_id"] = data.draw(st.sampled_from([world["paused"], world["done"]]))
        before = _snapshot(world, touched)
        # JSON, as the API takes (a state-changing request of another type is refused before the endpoint).
        response = case.call(headers={"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"})
        case.validate_response(response, checks=[not_a_server_error])
        if 400 <= response.status_code < 500:
            assert _snapshot(world, touched) == before, (case.method, case.formatted_path, response.status_code)
        elif case.method == "POST" and response.status_code < 300:
            # Accepted: the run changes now, in the server's background; compare it no more.
            touched.add(str((case.path_parameters or {}).get("run_id")))
        kind = response.headers.get("content-type") or [""]
        # JSON everywhere but the metrics' answer, in Prometheus's text format (its refusals are JSON).
        wanted = (
            "text/plain" if case.formatted_path == "/metrics" and response.status_code == 200 else "application/json"
        )
        assert (kind[0] if isinstance(kind, list) else kind).startswith(wanted)

    one_request()
