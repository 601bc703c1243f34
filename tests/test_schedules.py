"""Schedules (issue 33, item 2): a workflow or a notebook started at each time of a cron schedule.

The due-time logic is driven through ``Schedules.tick(now)`` with given times, on real stores of
both backends: a due time starts one run keyed by the schedule and the time; times missed while
no server ran start one run (``run-once``) or none (``skip``); two servers racing the same time
start one run and move the schedule once; a restart does not run a done time again. Then the
command line (``serve --schedule CRON TARGET -p NAME VALUE``), the REST endpoints as an attacker
meets them, the approvals page, the upgrade of a schema-5 store, and real servers that start a
due run on their own and keep one schedule across restarts.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nbformat
import pytest
from conftest import execute_sql, is_postgres, new_store

import durable_nb as dnb
from durable_nb.errors import ConfigurationError
from durable_nb.service.auth import Auth, load_tokens

pytest.importorskip("fastapi", reason="the service needs the serve extra (fastapi, uvicorn)")

from fastapi.testclient import TestClient
from servicekit import ADMIN, BASE, DECIDER, READER, TOKENS, Servers, load_flows, until

from durable_nb.cli import build_parser
from durable_nb.cli.serve import _planned, schedule_groups
from durable_nb.service.app import create_app
from durable_nb.service.cron import parse_cron
from durable_nb.service.errors import InvalidSchedule
from durable_nb.service.notebook_folder import NotebookFolder
from durable_nb.service.notebook_runs import NotebookRuns
from durable_nb.service.operations import Service
from durable_nb.service.schedules import GRACE, Planned, Schedules, schedule_key
from durable_nb.store import disconnect
from durable_nb.store.schedules import ScheduleRecord
from durable_nb.store.sqlite_schema import SCHEMA_VERSION

JSON = {"Content-Type": "application/json"}
# A fixed moment the tests' schedules are made at: Thursday 2026-12-03 10:02:30 UTC.
T0 = datetime(2026, 12, 3, 10, 2, 30, tzinfo=UTC).timestamp()
FIVE = 300.0


def _at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


@pytest.fixture
def flows(tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    return load_flows(tmp_path, store_url, monkeypatch)


def _keyed(store_url: str, schedule_id: str) -> list[str]:
    """The idempotency keys of the runs a schedule started, in order."""
    rows = execute_sql(
        store_url,
        "SELECT idempotency_key FROM runs WHERE idempotency_key LIKE ? ORDER BY idempotency_key",
        (f"schedule:{schedule_id}:%",),
    )
    return [str(row[0]) for row in rows]


async def _schedules_in(store_url: str) -> list[Any]:
    store = new_store(store_url)
    try:
        return await store.list_schedules()
    finally:
        await store.close()


class _Server:
    """What one server holds, in this process: its store object, its service and its schedules."""

    def __init__(self, flows: Any, store: Any, workflows: tuple[str, ...] = ("gated", "slow")) -> None:
        self.store = store
        self.service = Service([getattr(flows, name) for name in workflows], store)
        self.schedules = Schedules(self.service, clock=lambda: T0)

    async def add(self, cron: str = "*/5 * * * *", missed: str = "run-once", **target: Any) -> str:
        target = target or {"workflow": "gated", "input": {"who": "cron"}}
        added = await self.schedules.add(self.schedules.resolve(cron, missed=missed, **target))
        return str(added["id"])


def _run(flows: Any, store_url: str, body: Any) -> Any:
    """Run ``body(server)`` on a fresh server's loop; stop the runs it drives afterwards."""

    async def go() -> Any:
        server = _Server(flows, dnb.connect(store_url))
        try:
            return await body(server)
        finally:
            await server.service.stop()

    return asyncio.run(go())


# -- cron text ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "timezone", "said"),
    [
        pytest.param("*/5 * * *", "UTC", "Wrong number of fields", id="four-fields"),
        pytest.param("61 * * * *", "UTC", "Bad minute", id="minute-61"),
        pytest.param("0 0 31 4 *", "UTC", "Bad day-of-month", id="april-31"),
        pytest.param("", "UTC", "must be cron text", id="empty"),
        pytest.param("* " * 200, "UTC", "must be cron text", id="too-long"),
        pytest.param("@sometimes", "UTC", "cannot be used", id="unknown-name"),
        pytest.param("*/5 * * * *", "Mars/Olympus", "no IANA time zone", id="unknown-zone"),
        pytest.param("*/5 * * * *", "../../etc/passwd", "no IANA time zone", id="zone-path"),
    ],
)
def test_bad_cron_text_or_zone_is_refused_with_an_example(text: str, timezone: str, said: str) -> None:
    with pytest.raises(InvalidSchedule, match=said) as refused:
        parse_cron(text, timezone)
    assert "'UTC'" in str(refused.value) or "*/5 * * * *" in str(refused.value)


def test_due_times_follow_the_cron_text_in_its_zone() -> None:
    every_five = parse_cron("*/5 * * * *")
    assert every_five.after(T0) == _at("2026-12-03T10:05:00+00:00")
    assert every_five.after(_at("2026-12-03T10:05:00+00:00")) == _at("2026-12-03T10:10:00+00:00")  # strictly after
    assert every_five.latest(T0) == _at("2026-12-03T10:00:00+00:00")
    assert every_five.latest(_at("2026-12-03T10:05:00+00:00")) == _at("2026-12-03T10:05:00+00:00")  # at or before
    assert parse_cron("@daily").after(T0) == _at("2026-12-04T00:00:00+00:00")
    assert parse_cron("0 9 * * MON-FRI").after(T0) == _at("2026-12-04T09:00:00+00:00")  # Friday, after Thursday's
    paris = parse_cron("30 2 * * *", "Europe/Paris")
    assert paris.after(T0) == _at("2026-12-04T02:30:00+01:00")
    # The night clocks go forward, 2:30 does not exist: it runs at the first time that does, once.
    night = _at("2026-03-28T12:00:00+01:00")
    assert paris.after(night) == _at("2026-03-29T03:00:00+02:00")
    assert paris.after(paris.after(night)) == _at("2026-03-30T02:30:00+02:00")


# -- due, missed, raced, restarted -------------------------------------------------------------------


def test_a_due_time_starts_one_run_keyed_by_the_schedule_and_the_time(flows: Any, store_url: str) -> None:
    async def body(server: _Server) -> None:
        sid = await server.add()
        due = _at("2026-12-03T10:05:00+00:00")
        assert await server.schedules.tick(due - 1) == []
        started = await server.schedules.tick(due + 2)
        assert [(s, t) for s, t, _ in started] == [(sid, due)]
        again = await server.schedules.tick(due + 3)  # the same time again: nothing
        assert again == []
        (listed,) = await server.schedules.list()
        assert listed["last_run"] == "2026-12-03T10:05:00Z" and listed["next_run"] == "2026-12-03T10:10:00Z"
        assert listed["last_run_id"] == started[0][2]
        record = await server.store.get_run(started[0][2])
        assert record.name == "gated" and record.idempotency_key == f"schedule:{sid}:2026-12-03T10:05:00Z"

    _run(flows, store_url, body)
    assert dnb.get_run(_keyed_run(store_url), store=store_url).state["who"] == "cron"  # its input


def _keyed_run(store_url: str) -> str:
    rows = execute_sql(store_url, "SELECT run_id FROM runs WHERE substr(idempotency_key, 1, 9) = 'schedule:'")
    assert len(rows) == 1
    return str(rows[0][0])


@pytest.mark.parametrize(("missed", "runs"), [("run-once", 1), ("skip", 0)])
def test_times_missed_while_no_server_ran_start_one_run_or_none(
    flows: Any, store_url: str, missed: str, runs: int
) -> None:
    async def body(server: _Server) -> str:
        sid = await server.add(missed=missed)
        # Down from 10:03 to 10:58:20: eleven times passed; the latest, 10:55, is older than the grace.
        back = _at("2026-12-03T10:58:20+00:00")
        assert back - _at("2026-12-03T10:55:00+00:00") > GRACE
        started = await server.schedules.tick(back)
        assert len(started) == runs
        (listed,) = await server.schedules.list()
        assert listed["next_run"] == "2026-12-03T11:00:00Z"  # on from the next time to come
        assert listed["last_run"] == ("2026-12-03T10:55:00Z" if runs else None)
        assert await server.schedules.tick(back + 1) == []
        return sid

    sid = _run(flows, store_url, body)
    assert _keyed(store_url, sid) == [f"schedule:{sid}:2026-12-03T10:55:00Z"][:runs]


def test_skip_still_runs_a_time_seen_within_the_grace(flows: Any, store_url: str) -> None:
    async def body(server: _Server) -> str:
        sid = await server.add(missed="skip")
        # Down across 10:05 and 10:10; back 20 s after 10:10: that time is late, not missed.
        started = await server.schedules.tick(_at("2026-12-03T10:10:20+00:00"))
        assert [t for _, t, _ in started] == [_at("2026-12-03T10:10:00+00:00")]
        return sid

    sid = _run(flows, store_url, body)
    assert _keyed(store_url, sid) == [f"schedule:{sid}:2026-12-03T10:10:00Z"]


def test_two_servers_racing_one_due_time_start_one_run(flows: Any, store_url: str) -> None:
    """Two servers, each with its own store connections, tick at the same due time many times over:
    each time starts one run, and the schedule moves on once per time."""

    async def body() -> tuple[str, list[Any]]:
        one, two = _Server(flows, dnb.connect(store_url)), _Server(flows, new_store(store_url))
        try:
            sid = await one.add()
            assert await two.add() == sid  # the same schedule: one row
            due = _at("2026-12-03T10:05:00+00:00")
            outcomes = []
            for step in range(6):
                at = due + step * FIVE + 1
                outcomes.append(await asyncio.gather(one.schedules.tick(at), two.schedules.tick(at)))
            return sid, outcomes
        finally:
            await one.service.stop()
            await two.service.stop()
            await two.store.close()

    sid, outcomes = asyncio.run(body())
    for pair in outcomes:
        assert sum(len(started) for started in pair) == 1  # one of them moved it on
    keys = _keyed(store_url, sid)
    assert keys == [f"schedule:{sid}:2026-12-03T10:{m:02d}:00Z" for m in (5, 10, 15, 20, 25, 30)]
    assert execute_sql(store_url, "SELECT COUNT(*) FROM schedules") == [(1,)]


def test_a_restart_does_not_run_a_done_time_again(flows: Any, store_url: str) -> None:
    due = _at("2026-12-03T10:05:00+00:00")

    async def first(server: _Server) -> tuple[str, str]:
        sid = await server.add()
        assert len(await server.schedules.tick(due + 1)) == 1
        # The next time: the server starts its run, then stops before moving the schedule on.
        record = await server.store.get_schedule(sid)
        assert record is not None
        stopped = await server.schedules._start(record, due + FIVE)
        return sid, stopped

    sid, stopped = _run(flows, store_url, first)

    async def after_restart(server: _Server) -> list[Any]:
        return [await server.schedules.tick(due + 2), await server.schedules.tick(due + FIVE + 2)]

    done, next_time = _run(flows, store_url, after_restart)
    assert done == []  # 10:05 ran before the restart
    assert next_time == [(sid, due + FIVE, stopped)]  # 10:10's run was found by its key, not made again
    assert len(_keyed(store_url, sid)) == 2


def test_the_same_schedule_is_kept_and_its_policy_updated(flows: Any, store_url: str) -> None:
    async def body(server: _Server) -> None:
        sid = await server.add()
        await server.schedules.tick(_at("2026-12-03T10:05:01+00:00"))
        same = server.schedules.resolve("*/5  *  * * *", missed="skip", workflow="gated", input={"who": "cron"})
        again = await server.schedules.add(same)
        assert again["id"] == sid and again["created"] is False
        (listed,) = await server.schedules.list()
        assert listed["missed"] == "skip" and listed["last_run"] == "2026-12-03T10:05:00Z"  # its runs kept
        other = await server.add(workflow="gated", input={"who": "other"})
        assert other != sid and len(await server.schedules.list()) == 2

    _run(flows, store_url, body)


def test_a_server_leaves_alone_the_schedules_it_cannot_run(flows: Any, store_url: str) -> None:
    async def body() -> None:
        both, only_gated = _Server(flows, dnb.connect(store_url)), _Server(flows, new_store(store_url), ("gated",))
        try:
            sid = await both.add(workflow="slow")
            assert await only_gated.schedules.tick(_at("2026-12-03T10:05:01+00:00")) == []
            (listed,) = await only_gated.schedules.list()
            assert listed["id"] == sid and listed["next_run"] == "2026-12-03T10:05:00Z"  # still due, for another
        finally:
            await both.service.stop()
            await only_gated.service.stop()
            await only_gated.store.close()

    asyncio.run(body())
    assert execute_sql(store_url, "SELECT COUNT(*) FROM runs") == [(0,)]


def test_a_schedule_row_this_server_cannot_read_holds_up_no_other(flows: Any, store_url: str) -> None:
    async def body(server: _Server) -> list[Any]:
        sid = await server.add()
        unreadable = ScheduleRecord(
            "sch-unreadable", "0 * * * *", "Nowhere/Land", "workflow", "gated", {}, "skip", "api", 0.0
        )
        await server.store.put_schedule(unreadable)  # as a store written elsewhere might hold
        started = await server.schedules.tick(_at("2026-12-03T10:05:01+00:00"))
        assert [s for s, _, _ in started] == [sid]
        return await server.schedules.list()

    listed = _run(flows, store_url, body)
    assert [(s["id"], s["next_run"]) for s in listed] == [
        ("sch-unreadable", "1970-01-01T00:00:00Z"),  # left as it was, for a server that can read it
        (listed[1]["id"], "2026-12-03T10:10:00Z"),
    ]


@pytest.mark.backends("sqlite")
def test_a_time_whose_notebook_is_gone_is_passed_over(flows: Any, store_url: str, tmp_path: Path) -> None:
    folder = tmp_path / "notebooks"
    folder.mkdir()
    _notebook(folder / "report.ipynb", tmp_path)

    async def body() -> Any:
        store = dnb.connect(store_url)
        service = Service([flows.gated], store, NotebookRuns(NotebookFolder(folder), store))
        schedules = Schedules(service, clock=lambda: T0)
        try:
            await schedules.add(schedules.resolve("*/5 * * * *", notebook="report.ipynb"))
            (folder / "report.ipynb").unlink()
            started = await schedules.tick(_at("2026-12-03T10:05:01+00:00"))
            return started, await schedules.list()
        finally:
            await service.stop()

    started, (listed,) = asyncio.run(body())
    assert started == [] and listed["next_run"] == "2026-12-03T10:10:00Z" and listed["last_run"] is None
    assert execute_sql(store_url, "SELECT COUNT(*) FROM runs") == [(0,)]


# -- the command line --------------------------------------------------------------------------------


def _serve_args(*words: str) -> Any:
    return build_parser().parse_args(schedule_groups(["serve", *words]))


def test_serve_takes_schedules_with_their_parameters() -> None:
    args = _serve_args(
        "--workflow", "m:f",
        "--schedule", "*/5 * * * *", "gated", "-p", "who", "-1", "-p", "limit", "3",
        "--port", "0",
        "--schedule", "0 6 * * *", "reports/daily.ipynb", "-p", "region", "EU",
        "--missed", "skip", "--schedule-timezone", "Europe/Paris",
    )  # fmt: skip
    assert args.port == 0 and args.workflow == ["m:f"]
    assert _planned(args) == [
        Planned("*/5 * * * *", "gated", {"who": -1, "limit": 3}, "skip", "Europe/Paris"),
        Planned("0 6 * * *", "reports/daily.ipynb", {"region": "EU"}, "skip", "Europe/Paris"),
    ]


def test_serve_refuses_a_parameter_without_its_schedule() -> None:
    with pytest.raises(ConfigurationError, match="right after the --schedule"):
        _planned(_serve_args("-p", "who", "x"))


@pytest.mark.parametrize(
    "words",
    [
        pytest.param(["--schedule", "*/5 * * * *"], id="cut-short"),
        pytest.param(["--schedule", "* * * * *", "gated", "--missed", "always"], id="bad-policy"),
    ],
)
def test_serve_refuses_malformed_schedule_words(words: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        _serve_args(*words)
    assert exited.value.code == 2 and "--" in capsys.readouterr().err


def _auth() -> Auth:
    return Auth(load_tokens(environ={"DURABLE_NB_TOKENS": TOKENS}))


@pytest.mark.backends("sqlite")
@pytest.mark.parametrize(
    ("planned", "said"),
    [
        pytest.param(Planned("*/5 * * *", "gated", {}), "--schedule '\\*/5 \\* \\* \\*' gated: cron", id="bad-cron"),
        pytest.param(Planned("* * * * *", "nothing", {}), "names no workflow this server serves", id="unknown"),
        pytest.param(Planned("* * * * *", "r.ipynb", {}), "runs no notebooks", id="no-notebooks"),
        pytest.param(Planned("* * * * *", "gated", {}, "always"), "missed must be", id="bad-policy"),
        pytest.param(Planned("* * * * *", "gated", {}, timezone="Nowhere/Land"), "time zone", id="bad-zone"),
    ],
)
def test_a_bad_command_line_schedule_stops_the_server_before_it_listens(
    flows: Any, store_url: str, planned: Planned, said: str
) -> None:
    with pytest.raises(ConfigurationError, match=said):
        create_app([flows.gated], store=store_url, auth=_auth(), schedules=[planned])
    assert asyncio.run(_schedules_in(store_url)) == []


@pytest.mark.backends("sqlite")
def test_command_line_schedules_are_kept_once_across_restarts(flows: Any, store_url: str) -> None:
    planned = [Planned("0 6 * * *", "gated", {"who": "cli"}, "skip")]
    for _ in range(2):
        with TestClient(create_app([flows.gated], store=store_url, auth=_auth(), schedules=planned), base_url=BASE):
            pass
    (row,) = execute_sql(store_url, "SELECT cron, kind, target, input, missed, source FROM schedules")
    assert row == ("0 6 * * *", "workflow", "gated", '{"who": "cli"}', "skip", "command line")


# -- the REST endpoints, as an attacker meets them ---------------------------------------------------


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **JSON}


@pytest.fixture
def client(flows: Any, store_url: str, tmp_path: Path) -> Iterator[TestClient]:
    folder = tmp_path / "notebooks"
    folder.mkdir()
    _notebook(folder / "report.ipynb", tmp_path)
    app = create_app([flows.gated, flows.slow], store=store_url, auth=_auth(), recover_every=3600, notebooks=folder)
    with TestClient(app, base_url=BASE) as found:
        yield found


def _notebook(path: Path, folder: Path) -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("region = 'US'", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(f"open({str(folder / 'side.txt')!r}, 'a').write(region + '\\n')"),
    ]
    nbformat.write(notebook, path)


def _stored(store_url: str) -> list[str]:
    """The ids of the store's schedules, read as another process would."""
    return [s.schedule_id for s in asyncio.run(_schedules_in(store_url))]


EVERY_FIVE = {"cron": "*/5 * * * *", "workflow": "gated", "input": {"who": "api"}}


@pytest.mark.backends("sqlite")
def test_schedules_over_rest_need_admin_to_change_and_read_to_list(client: TestClient, store_url: str) -> None:
    for headers, status, error in [
        (JSON, 401, "Unauthorized"),
        (_bearer("x" * 24), 401, "Unauthorized"),
        (_bearer(READER), 403, "Forbidden"),
        (_bearer(DECIDER), 403, "Forbidden"),
    ]:
        refused = client.post("/api/schedules", json=EVERY_FIVE, headers=headers)
        assert (refused.status_code, refused.json()["error"]) == (status, error)
    assert _stored(store_url) == [] and client.get("/api/schedules", headers=JSON).status_code == 401

    added = client.post("/api/schedules", json=EVERY_FIVE, headers=_bearer(ADMIN))
    assert added.status_code == 201 and set(added.json()) == {"id", "next_run", "created"}
    sid = added.json()["id"]
    assert client.post("/api/schedules", json=EVERY_FIVE, headers=_bearer(ADMIN)).json()["id"] == sid
    listed = client.get("/api/schedules", headers=_bearer(READER)).json()
    assert [(s["id"], s["workflow"], s["input"], s["next_run"], s["last_run"]) for s in listed] == [
        (sid, "gated", {"who": "api"}, added.json()["next_run"], None)
    ]
    assert client.get(f"/api/schedules/{sid}", headers=_bearer(READER)).json()["id"] == sid

    assert client.delete(f"/api/schedules/{sid}", headers=_bearer(READER)).status_code == 403
    assert client.delete(f"/api/schedules/{sid}", headers=_bearer(ADMIN)).json() == {"id": sid, "deleted": True}
    gone = client.delete(f"/api/schedules/{sid}", headers=_bearer(ADMIN))
    assert (gone.status_code, gone.json()["error"]) == (404, "ScheduleNotFound")
    assert client.get(f"/api/schedules/{sid}", headers=_bearer(READER)).status_code == 404
    assert _stored(store_url) == []


@pytest.mark.backends("sqlite")
@pytest.mark.parametrize(
    ("body", "status", "error", "said"),
    [
        pytest.param({**EVERY_FIVE, "cron": "*/5 * * *"}, 400, "InvalidSchedule", "cron '*/5 * * *'", id="bad-cron"),
        pytest.param({**EVERY_FIVE, "cron": 5}, 422, "InvalidRequest", "cron", id="cron-not-text"),
        pytest.param({"workflow": "gated"}, 422, "InvalidRequest", "cron", id="no-cron"),
        pytest.param({**EVERY_FIVE, "timezone": "Nowhere/Land"}, 400, "InvalidSchedule", "time zone", id="bad-zone"),
        pytest.param({**EVERY_FIVE, "missed": "all"}, 400, "InvalidSchedule", "missed must be", id="bad-policy"),
        pytest.param({**EVERY_FIVE, "workflow": "nothing"}, 404, "WorkflowNotFound", "no workflow", id="unknown"),
        pytest.param({"cron": "* * * * *"}, 400, "InvalidSchedule", "name one", id="no-target"),
        pytest.param({**EVERY_FIVE, "notebook": "report.ipynb"}, 400, "InvalidSchedule", "name one", id="both"),
        pytest.param({**EVERY_FIVE, "parameters": {"a": 1}}, 400, "InvalidSchedule", "takes", id="wrong-values"),
        pytest.param(
            {"cron": "* * * * *", "notebook": "../report.ipynb"}, 400, "NotebookPathRefused", "'..'", id="escapes"
        ),
        pytest.param(
            {"cron": "* * * * *", "notebook": "/etc/report.ipynb"}, 400, "NotebookPathRefused", "absolute", id="abs"
        ),
        pytest.param({"cron": "* * * * *", "notebook": "none.ipynb"}, 404, "NotebookNotFound", "", id="missing"),
        pytest.param({**EVERY_FIVE, "input": [1]}, 422, "InvalidRequest", "input", id="input-not-object"),
    ],
)
def test_a_bad_schedule_is_refused_and_nothing_stored(
    client: TestClient, store_url: str, body: dict[str, Any], status: int, error: str, said: str
) -> None:
    refused = client.post("/api/schedules", json=body, headers=_bearer(ADMIN))
    assert (refused.status_code, refused.json()["error"]) == (status, error), refused.text
    assert said in refused.json()["message"]
    assert _stored(store_url) == []


@pytest.mark.backends("sqlite")
@pytest.mark.parametrize(
    ("headers", "status", "error"),
    [
        pytest.param({"Host": "evil.example"}, 400, "HostNotAllowed", id="foreign-host"),
        pytest.param({"Origin": "http://127.0.0.1:9999"}, 403, "CrossSiteRequest", id="cross-origin"),
        pytest.param({"Origin": "null"}, 403, "CrossSiteRequest", id="sandboxed-origin"),
        pytest.param({"Content-Type": "text/plain"}, 415, "UnsupportedMediaType", id="not-json"),
    ],
)
def test_a_foreign_or_forged_schedule_request_changes_nothing(
    client: TestClient, store_url: str, headers: dict[str, str], status: int, error: str
) -> None:
    sid = client.post("/api/schedules", json=EVERY_FIVE, headers=_bearer(ADMIN)).json()["id"]
    other = {**EVERY_FIVE, "input": {"who": "attacker"}}
    sent = {**_bearer(ADMIN), **headers}
    refused = client.post("/api/schedules", content=json.dumps(other), headers=sent)
    assert (refused.status_code, refused.json()["error"]) == (status, error)
    deleted = client.delete(f"/api/schedules/{sid}", headers=sent)
    assert (deleted.status_code, deleted.json()["error"]) == (status, error)
    assert _stored(store_url) == [sid]


@pytest.mark.backends("sqlite")
def test_an_oversized_schedule_is_refused(flows: Any, store_url: str) -> None:
    app = create_app([flows.gated], store=store_url, auth=_auth(), recover_every=3600, max_body=1024)
    with TestClient(app, base_url=BASE) as client:
        big = {**EVERY_FIVE, "input": {"who": "x" * 2048}}
        refused = client.post("/api/schedules", json=big, headers=_bearer(ADMIN))
        assert (refused.status_code, refused.json()["error"]) == (413, "BodyTooLarge")
    assert _stored(store_url) == []


@pytest.mark.backends("sqlite")
def test_the_openapi_document_lists_the_schedules(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert set(paths["/api/schedules"]) == {"get", "post"}
    assert set(paths["/api/schedules/{schedule_id}"]) == {"get", "delete"}


@pytest.mark.backends("sqlite")
def test_the_python_client_adds_lists_and_deletes_schedules(client: TestClient, store_url: str) -> None:
    from durable_nb.service.client import _schedule

    body = _schedule("0 6 * * *", None, None, "report.ipynb", {"region": "EU"}, "Europe/Paris", "skip")
    assert body == {
        "cron": "0 6 * * *",
        "timezone": "Europe/Paris",
        "missed": "skip",
        "notebook": "report.ipynb",
        "parameters": {"region": "EU"},
    }
    added = client.post("/api/schedules", json=body, headers=_bearer(ADMIN)).json()
    (listed,) = client.get("/api/schedules", headers=_bearer(READER)).json()
    assert listed["notebook"] == "report.ipynb" and listed["parameters"] == {"region": "EU"}
    assert listed["id"] == added["id"] and listed["next_run"].endswith(("04:00:00Z", "05:00:00Z"))  # 6:00 in Paris


@pytest.mark.backends("sqlite")
def test_metrics_count_the_schedules_and_how_overdue_they_are(client: TestClient, store_url: str) -> None:
    def figure(name: str) -> float:
        text = client.get("/metrics", headers=_bearer(READER)).text
        (line,) = [line for line in text.splitlines() if line.startswith(name + " ")]
        return float(line.split()[1])

    assert figure("durable_nb_schedules") == 0 and figure("durable_nb_schedule_overdue_seconds") == 0
    client.post("/api/schedules", json=EVERY_FIVE, headers=_bearer(ADMIN))
    assert figure("durable_nb_schedules") == 1 and figure("durable_nb_schedule_overdue_seconds") == 0
    # A schedule of a workflow no server serves, due an hour ago: it stays due, an hour overdue.
    due = time.time() - 3600
    asyncio.run(
        _put(
            store_url,
            ScheduleRecord("sch-orphan", "0 * * * *", "UTC", "workflow", "elsewhere", {}, "run-once", "api", due),
        )
    )
    assert figure("durable_nb_schedules") == 2 and figure("durable_nb_schedule_overdue_seconds") >= 3600


async def _put(store_url: str, record: ScheduleRecord) -> None:
    store = new_store(store_url)
    try:
        await store.put_schedule(record)
    finally:
        await store.close()


# -- the approvals page -------------------------------------------------------------------------------


@pytest.mark.backends("sqlite")
def test_the_approvals_page_shows_each_schedule_with_its_next_and_last_runs(client: TestClient, store_url: str) -> None:
    client.post("/api/schedules", json=EVERY_FIVE, headers=_bearer(ADMIN))
    schedules: Schedules = client.app.state.schedules  # type: ignore[attr-defined]
    (listed,) = client.get("/api/schedules", headers=_bearer(READER)).json()
    due = _at(listed["next_run"].replace("Z", "+00:00"))
    ((sid, _, run_id),) = client.portal.call(schedules.tick, due + 1)  # type: ignore[union-attr]
    page = client.get("/", headers=_bearer(READER)).text
    assert "<h2>Schedules (1)</h2>" in page
    row = page.split(f"data-schedule='{sid}'", 1)[1].split("</tr>", 1)[0]
    assert "workflow <b>gated</b>" in row and "<code>*/5 * * * *</code>" in row
    assert f"<a href='/runs/{run_id}'>{run_id}</a>" in row and "run-once" in row
    assert row.count("<span title=") == 2  # the next run and the last one


# -- a schema-5 store ---------------------------------------------------------------------------------


def test_a_schema_5_store_gets_the_schedules_table_and_keeps_its_runs(flows: Any, store_url: str) -> None:
    run = flows.gated.run({"who": "before"})
    disconnect(store_url)
    # Back to schema 5, as durable_nb left stores before schedules (and pending writes as rows).
    execute_sql(store_url, "DROP TABLE schedules")
    execute_sql(store_url, "DROP TABLE pending_writes")
    execute_sql(store_url, "DELETE FROM schema_version WHERE version >= 6")
    assert execute_sql(store_url, "SELECT MAX(version) FROM schema_version") == [(5,)]

    store = new_store(store_url)

    async def upgraded() -> Any:
        try:
            return await store.get_run(run.id), await store.list_schedules()
        finally:
            await store.close()

    record, schedules = asyncio.run(upgraded())
    assert record.status.value == "paused" and schedules == []
    assert execute_sql(store_url, "SELECT MAX(version) FROM schema_version") == [(SCHEMA_VERSION,)] == [(8,)]
    found = "SELECT COUNT(*) FROM " + (
        "pg_indexes WHERE indexname = 'schedules_by_next_run' AND schemaname = current_schema()"
        if is_postgres(store_url)
        else "sqlite_master WHERE name = 'schedules_by_next_run'"
    )
    assert execute_sql(store_url, found) == [(1,)]


# -- real servers ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_real_server_starts_due_runs_and_keeps_one_schedule_across_restarts(serving: Servers) -> None:
    """``serve --schedule`` every second: the server starts runs on its own, one per time; restarted
    with the same flags, the store still holds one schedule, and it goes on."""
    options = ("--schedule", "* * * * * *", "gated", "-p", "who", "cron")
    first = serving(*options)
    (listed,) = first.client.schedules()
    assert listed["source"] == "command line" and listed["input"] == {"who": "cron"}
    ran = until(lambda: first.client.schedules()[0]["last_run_id"], "a scheduled run")
    record = dnb.get_run(ran, store=serving.store).record
    assert record.name == "gated" and record.idempotency_key.startswith(f"schedule:{listed['id']}:")
    first.stop()
    second = serving(*options)
    assert [s["id"] for s in second.client.schedules()] == [listed["id"]]
    keys = until(lambda: len(_keyed(serving.store, listed["id"])) > 2 and _keyed(serving.store, listed["id"]), "more")
    assert len(keys) == len(set(keys))  # each time one run
    assert second.client.unschedule(listed["id"]) == {"id": listed["id"], "deleted": True}
    assert second.client.schedules() == []


@pytest.mark.slow
@pytest.mark.backends("sqlite")
def test_a_scheduled_notebook_runs_as_a_run_of_its_own_per_time(flows: Any, store_url: str, tmp_path: Path) -> None:
    """A notebook's scheduled runs are keyed by the time, not by its path and parameters: each due
    time runs the notebook from the top in a child process, and its record says how to start it again."""
    folder = tmp_path / "notebooks"
    folder.mkdir()
    _notebook(folder / "report.ipynb", tmp_path)

    async def body() -> list[str]:
        store = dnb.connect(store_url)
        runner = NotebookRuns(NotebookFolder(folder), store)
        service = Service([flows.gated], store, runner)
        schedules = Schedules(service, clock=lambda: T0)
        try:
            record = schedules.resolve("*/5 * * * *", notebook="report.ipynb", parameters={"region": "EU"})
            await schedules.add(record)
            started = []
            for due in (_at("2026-12-03T10:05:00+00:00"), _at("2026-12-03T10:10:00+00:00")):
                ((_, _, run_id),) = await schedules.tick(due + 1)
                started.append(run_id)
                while (await store.get_run(run_id)).status.value != "completed":
                    await asyncio.sleep(0.1)
            return started
        finally:
            await service.stop()

    first, second = asyncio.run(asyncio.wait_for(body(), 240))
    assert first != second
    assert (tmp_path / "side.txt").read_text().split() == ["EU", "EU"]
    record = dnb.get_run(second, store=store_url).record
    assert record.meta["notebook"]["key"] == record.idempotency_key
    (schedule,) = asyncio.run(_schedules_in(store_url))
    assert record.idempotency_key == schedule_key(schedule, _at("2026-12-03T10:10:00+00:00"))
