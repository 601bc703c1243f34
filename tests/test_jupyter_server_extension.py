"""The Jupyter server extension: JupyterLab's panel API and the approvals page, in a real ``jupyter server``.

A real server (subprocess, token, the extension enabled), real SQLite stores (one case on the
real PostgreSQL), runs paused at real gates; requests as JupyterLab sends them, and as an
attacker would.
"""

from __future__ import annotations

import json
import os
import re
import site
import subprocess
import sys
import tomllib
import venv
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from jupyterkit import TOKEN, JupyterServer

import durable_nb as dnb
from durable_nb._loop import run_sync
from durable_nb.engine.gates.decisions import decide, make_decision
from durable_nb.jupyter.frontend import LABEXTENSION, MISSING_FRONT_END, installed_front_end
from durable_nb.jupyter.shapes import run_detail, version_of
from durable_nb.jupyter.stores import store_key, store_label
from durable_nb.store import disconnect

pytestmark = pytest.mark.backends("sqlite")


def review(url: str) -> dnb.Workflow:
    """A workflow whose one node waits at a gate asking ``state["reason"]`` with ``state["context"]``."""
    flow = dnb.Workflow("review", store=url)

    @flow.node()
    def publish(state: dict[str, Any]) -> dict[str, Any]:
        decision = dnb.gate(state["reason"], state["context"])
        return {"published": decision.approved}

    return flow


def paused_run(url: str, reason: str = "publish?", context: Any = None) -> str:
    """Start a run that pauses at its gate; return its id."""
    run = review(url).run({"reason": reason, "context": {"draft": "hello"} if context is None else context})
    assert run.status == "paused"
    return run.id


def decisions(url: str, run_id: str) -> list[dict[str, Any]]:
    """The decisions recorded in a run (one checkpoint each)."""
    checkpoints = run_sync(dnb.connect(url).list_checkpoints(run_id))
    return [c.decision for c in checkpoints if c.step.startswith("approved:")]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[JupyterServer, str]]:
    """One Jupyter server for the module, serving the store its config names (``c.DurableNB.store``)."""
    folder = tmp_path_factory.mktemp("jupyter")
    url = f"sqlite:///{folder}/runs.db"
    # The key file the tests sign values with (the autouse isolation's, set up after this fixture), so that
    # the server loads what they store.
    keys = {"XDG_CONFIG_HOME": str(tmp_path_factory.getbasetemp() / "config")}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CONFIG_HOME", keys["XDG_CONFIG_HOME"])
        paused_run(url)  # the store exists before the server starts, as a user's does
    server = JupyterServer(folder, env=keys, options=[f"--DurableNB.store={url}"])
    yield server, url
    server.stop()
    disconnect(url)


def api(run_id: str, tail: str = "") -> str:
    return f"/durable/api/runs/{quote(run_id, safe='')}{tail}"


# -- what the panel reads and does --------------------------------------------------------------


@pytest.mark.backends("sqlite", "postgres")
def test_the_panel_reads_a_run_waiting_at_a_gate(tmp_path: Path, store_url: str) -> None:
    """GET stores, run and version: the configured store by key, the run with its checkpoints, fork tree,
    gate (reason, context) and version; the version is the one the run read gave."""
    run_id = paused_run(store_url, "ship it?", {"rows": 3})
    server = JupyterServer(tmp_path, env={"DURABLE_NB_STORE": store_url})
    try:
        stores = server.get("/durable/api/stores").json()["stores"]
        key = store_key(store_url)
        assert {"key": key, "label": store_label(store_url), "source": "config"} in stores
        assert all(re.fullmatch(r"[0-9a-f]{16}", s["key"]) for s in stores)
        answer = server.get(api(run_id), params={"store": key})
        assert answer.status_code == 200, answer.text
        shown = answer.json()
        assert shown["run"]["run_id"] == run_id
        assert shown["run"]["status"] == "paused"
        assert shown["run"]["store_key"] == key
        assert [g["node"] for g in shown["gates"]] == ["publish"]
        assert shown["gates"][0]["reason"] == "ship it?"
        assert shown["gates"][0]["context"] == {"rows": 3}
        assert shown["gates"][0]["checkpoint_id"] in [c["checkpoint_id"] for c in shown["checkpoints"]]
        assert [(t["run_id"], t["name"]) for t in shown["forks"]] == [(run_id, shown["run"]["name"])]
        assert shown["forks"][0]["children"] == []
        version = server.get(api(run_id, "/version"), params={"store": key}).json()["version"]
        assert version == shown["version"]
    finally:
        server.stop()


def test_a_decision_is_recorded_once_and_the_second_is_refused(served: tuple[JupyterServer, str]) -> None:
    """POST a decision: recorded once, by the Jupyter user's name; a second one gets 409 AlreadyResumed."""
    server, url = served
    run_id = paused_run(url)
    me = server.get("/api/me").json()["identity"]
    gate = server.get(api(run_id), params={"store": store_key(url)}).json()["gates"][0]["checkpoint_id"]
    wrong = server.post(
        api(run_id, "/gates/publish"), params={"store": store_key(url)}, json={"approved": True, "checkpoint_id": "x"}
    )
    assert wrong.status_code in (404, 409), wrong.text  # not the gate that waits: nothing decided
    assert decisions(url, run_id) == []
    first = server.post(
        api(run_id, "/gates/publish"),
        params={"store": store_key(url)},
        json={"approved": True, "comment": "fine", "checkpoint_id": gate},
    )
    assert first.status_code == 200, first.text
    assert first.json()["approved"] is True
    assert first.json()["by"] in (me["name"], me["username"]) or first.json()["by"].startswith("Anonymous")
    second = server.post(api(run_id, "/gates/publish"), params={"store": store_key(url)}, json={"approved": False})
    assert second.status_code == 409
    assert second.json()["error"] == "AlreadyResumed"
    recorded = decisions(url, run_id)
    assert len(recorded) == 1
    assert recorded[0]["approved"] is True
    assert recorded[0]["comment"] == "fine"
    assert recorded[0]["by"] == first.json()["by"]
    # The run waits for a process that has its code; resuming it completes it with the decision.
    assert review(url).resume(run_id).state["published"] is True


def test_a_decision_from_another_process_changes_the_version(served: tuple[JupyterServer, str]) -> None:
    """The panel's poll: the version changes when another process decides, and the run shows no gate."""
    server, url = served
    run_id = paused_run(url)
    key = store_key(url)
    before = server.get(api(run_id, "/version"), params={"store": key}).json()["version"]
    assert server.get(api(run_id, "/version"), params={"store": key}).json()["version"] == before
    subprocess.run(
        [sys.executable, "-m", "durable_nb.cli", "approve", run_id, "--store", url, "--comment", "from the CLI"],
        check=True,
        capture_output=True,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent)),
        timeout=120,
    )
    after = server.get(api(run_id, "/version"), params={"store": key}).json()["version"]
    assert after != before
    shown = server.get(api(run_id), params={"store": key}).json()
    assert shown["gates"] == []
    assert shown["version"] == after
    again = server.post(api(run_id, "/gates/publish"), params={"store": key}, json={"approved": True})
    assert again.status_code == 409


def test_a_decision_made_while_the_panel_reads_the_run_leaves_its_version_behind(tmp_path: Path) -> None:
    """A decision landing while the panel's read of the run is under way (here just after the run's own
    read of its gates) must not carry the newer version: with it the panel would keep showing the gate, since
    every later poll would answer the version it already has."""
    url = f"sqlite:///{tmp_path}/runs.db"
    run_id = paused_run(url)
    store = dnb.connect(url)
    read_gates = store.pending_interrupts

    decided: list[bool] = []

    async def gates_then_a_decision(run: str) -> Any:
        gates = await read_gates(run)
        if not decided:  # the decision reads the gates too: it lands once, after the panel's read
            decided.append(True)
            await decide(store, run, make_decision(True, comment="meanwhile"), "publish")
        return gates

    async def read() -> tuple[dict[str, Any], str]:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(store, "pending_interrupts", gates_then_a_decision)
            detail = await run_detail(store, run_id, store_key(url))
        return detail, await version_of(store, run_id)

    detail, now = run_sync(read())
    assert detail["run"]["status"] == "paused"  # read before the decision
    assert detail["version"] != now  # so the next poll reads the run again
    disconnect(url)


def test_a_fork_made_by_another_process_changes_the_version(served: tuple[JupyterServer, str]) -> None:
    """The panel shows the fork tree: a fork made elsewhere (here the CLI) changes the run's version, and
    the next read lists it under the run, by name."""
    server, url = served
    run_id = paused_run(url)
    key = store_key(url)
    before = server.get(api(run_id, "/version"), params={"store": key}).json()["version"]
    made = subprocess.run(
        [sys.executable, "-m", "durable_nb.cli", "fork", run_id, "--store", url, "--json"],
        check=True,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent)),
        timeout=120,
    )
    fork_id = json.loads(made.stdout)["run_id"]
    after = server.get(api(run_id, "/version"), params={"store": key}).json()["version"]
    assert after != before
    shown = server.get(api(run_id), params={"store": key}).json()
    assert shown["version"] == after
    assert [child["run_id"] for child in shown["forks"][0]["children"]] == [fork_id]
    assert shown["forks"][0]["children"][0]["name"] == shown["run"]["name"]


@pytest.mark.slow
def test_the_panel_reads_and_decides_gates_waiting_in_a_replays_forks(served: tuple[JupyterServer, str]) -> None:
    """A replay's fork paused at a gate: the user's run lists it (its fork, values, checkpoint) with the
    replay's progress; a decision posted for the fork is recorded on the fork, not on the user's run."""
    from shellkit import gated_run

    from durable_nb.engine.cells.replay_runs import start_replay

    server, url = served
    key = store_key(url)
    run_id = gated_run(url, "gated-replay")
    started = start_replay(url, run_id, "review", sweep={"rate": [2.0]})
    assert started.worker is not None
    started.worker.wait(timeout=120)  # paused, and nothing left replaying it: the decision continues nothing
    [fork] = started.runs()
    assert fork.status == "paused"
    shown = server.get(api(run_id), params={"store": key}).json()
    assert shown["gates"] == []  # the user's run waits at nothing
    [waiting] = shown["fork_gates"]
    assert (waiting["node"], waiting["reason"], waiting["context"]) == ("review", "publish?", {"rate": 2.0})
    assert waiting["run"]["run_id"] == fork.id and waiting["run"]["parent_run_id"] == run_id
    assert waiting["run"]["overrides"] == ["rate"] and waiting["run"]["values"] == {"rate": 2.0}
    assert waiting["run"]["replay_of"] == run_id
    [replay] = shown["replays"]
    assert replay["run_id"] == fork.id and (replay["of"], replay["at"]) == (run_id, "review")
    assert (replay["status"], replay["done"], replay["total"], replay["values"]) == ("paused", 0, 2, {"rate": 2.0})
    # The fork's own detail lists its gate as its own, and the user's run waits at none.
    assert [g["node"] for g in server.get(api(fork.id), params={"store": key}).json()["gates"]] == ["review"]
    before = decisions(url, run_id)
    decided = server.post(
        api(fork.id, "/gates/review"),
        params={"store": key},
        json={"approved": False, "comment": "not at 2.0", "checkpoint_id": waiting["checkpoint_id"]},
    )
    assert decided.status_code == 200, decided.text
    assert decided.json()["run_id"] == fork.id and decided.json()["status"] == "pending"
    assert [(d["approved"], d["comment"]) for d in decisions(url, fork.id)] == [(False, "not at 2.0")]
    assert decisions(url, run_id) == before
    after = server.get(api(run_id), params={"store": key}).json()
    assert after["fork_gates"] == [] and after["replays"][0]["status"] == "pending"


def test_edited_cells_are_stale_when_their_code_differs_from_the_commit(tmp_path: Path, store_url: str) -> None:
    """POST stale: a committed cell edited in comments or spacing is not stale, changed code is; a cell
    never committed is not either."""
    from kernelkit import Kernel

    kernel = Kernel(tmp_path, env={"DURABLE_NB_STORE": store_url})
    try:
        assert kernel.run("%load_ext durable_nb").error is None
        assert kernel.run("%durable run edits").error is None
        assert kernel.run("%%durable load\nx = 1 + 1").error is None
        run_id = kernel.run("print(__import__('durable_nb').runs().iloc[0]['run_id'])").text.strip()
    finally:
        kernel.close()
    server = JupyterServer(tmp_path, env={"DURABLE_NB_STORE": store_url})
    try:
        cells = [
            {"cell_id": "same", "node": "load", "source": "%%durable load\nx = 1+1  # tidied"},
            {"cell_id": "changed", "node": "load", "source": "%%durable load\nx = 1 + 2"},
            {"cell_id": "broken", "node": "load", "source": "%%durable load\nx = ("},
            {"cell_id": "new", "node": "never", "source": "y = 2"},
        ]
        answer = server.post(api(run_id, "/stale"), params={"store": store_key(store_url)}, json={"cells": cells})
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"stale": ["changed", "broken"]}
    finally:
        server.stop()


def test_a_notebook_cell_paused_at_a_gate_continues_after_a_panel_decision(tmp_path: Path, store_url: str) -> None:
    """A cell of a real kernel pauses at a gate; the panel's POST decides it; the same kernel runs the
    cell again and continues with that decision, by the Jupyter user."""
    from kernelkit import Kernel

    kernel = Kernel(tmp_path, env={"DURABLE_NB_STORE": store_url})
    server = JupyterServer(tmp_path, env={"DURABLE_NB_STORE": store_url})
    try:
        assert kernel.run("%load_ext durable_nb\nimport durable_nb as dnb\n%durable run gated").error is None
        cell = "%%durable review\nd = dnb.gate('ship?', {'n': 3})\nshipped, who = d.approved, d.by"
        assert kernel.run(cell).error == "GatePending"
        run_id = kernel.run("print(dnb.runs().iloc[0]['run_id'])").text.strip()
        key = store_key(store_url)
        shown = server.get(api(run_id), params={"store": key}).json()
        assert [(g["node"], g["reason"], g["context"]) for g in shown["gates"]] == [("review", "ship?", {"n": 3})]
        decided = server.post(api(run_id, "/gates/review"), params={"store": key}, json={"approved": True})
        assert decided.status_code == 200, decided.text
        continued = kernel.run(cell)
        assert continued.error is None, continued.text
        assert f"True {decided.json()['by']}" in kernel.run("print(shipped, who)").text
        assert server.get(api(run_id), params={"store": key}).json()["gates"] == []
    finally:
        server.stop()
        kernel.close()


def test_the_approvals_page_decides_with_jupyters_xsrf_token(served: tuple[JupyterServer, str]) -> None:
    """/durable/approvals: the gate's form carries Jupyter's _xsrf, its store's key and its run; posting
    it records the decision once and shows the outcome."""
    server, url = served
    run_id = paused_run(url, "page decision?")
    with server.session() as browser:
        page = browser.get("/durable/approvals")
        assert page.status_code == 200
        section = page.text.split(f"data-run='{run_id}'", 1)[1].split("</section>", 1)[0]
        fields = dict(re.findall(r"<input type='hidden' name='(\w+)' value='([^']*)'>", section))
        assert set(fields) == {"_xsrf", "store", "run", "node"}
        assert fields["store"] == store_key(url) and fields["run"] == run_id and fields["node"] == "publish"
        action = re.search(r"<form method='post' action='([^']+)'>", section).group(1)  # type: ignore[union-attr]
        assert action == "/durable/approvals/decide"
        done = browser.post(action, data={**fields, "approved": "false", "comment": "not yet"})
        assert done.status_code == 200, done.text
        assert f"Rejected run {run_id}" in done.text
        again = browser.post(action, data={**fields, "approved": "true", "comment": ""})
        assert again.status_code == 409
        assert "Not recorded" in again.text
    assert [d["approved"] for d in decisions(url, run_id)] == [False]


# -- the kernels of this server -----------------------------------------------------------------


def _start_kernel(server: JupyterServer) -> str:
    started = server.post("/api/kernels", json={"name": "python3"})
    assert started.status_code == 201, started.text
    return started.json()["id"]


def _run_in(server: JupyterServer, kernel_id: str, code: str) -> None:
    """Run code in a kernel this server started, through its connection file (as a console would)."""
    from jupyter_client import BlockingKernelClient

    client = BlockingKernelClient(connection_file=str(server.runtime / f"kernel-{kernel_id}.json"))
    client.load_connection_file()
    client.start_channels()
    try:
        # Only the shell reply: the request waits in its socket until the kernel reads it (the client's
        # readiness check reads a heartbeat that may not beat yet, and output is not needed).
        sent = client.execute(code)
        reply = client.get_shell_msg(timeout=120)
        while reply["parent_header"].get("msg_id") != sent:
            reply = client.get_shell_msg(timeout=120)
        assert reply["content"]["status"] == "ok", reply["content"]
    finally:
        client.stop_channels()


def test_a_kernel_of_this_server_names_its_run_and_store(served: tuple[JupyterServer, str], tmp_path: Path) -> None:
    """A kernel that writes its registry entry: GET kernels/<id> gives its run and store key, and the
    server serves that store (source "kernel") until the kernel is gone."""
    server, _ = served
    other = f"sqlite:///{tmp_path}/kernel-store.db"
    run_id = paused_run(other, "kernel's gate?")
    kernel_id = _start_kernel(server)
    try:
        code = f"from durable_nb.jupyter.registry import write_kernel_entry\nwrite_kernel_entry({run_id!r}, {other!r})"
        _run_in(server, kernel_id, code)
        entry = server.runtime / f"durable-nb-kernel-{kernel_id}.json"
        assert entry.stat().st_mode & 0o777 == 0o600
        found = server.get(f"/durable/api/kernels/{kernel_id}")
        assert found.status_code == 200, found.text
        assert found.json() == {"run_id": run_id, "store_key": store_key(other)}
        assert {"key": store_key(other), "label": store_label(other), "source": "kernel"} in server.get(
            "/durable/api/stores"
        ).json()["stores"]
        shown = server.get(api(run_id), params={"store": store_key(other)}).json()
        assert shown["gates"][0]["reason"] == "kernel's gate?"
        # At exit the kernel removes its entry: the server then serves neither its run nor its store.
        _run_in(server, kernel_id, "from durable_nb.jupyter.registry import remove_kernel_entry\nremove_kernel_entry()")
        assert not entry.exists()
        assert server.get(f"/durable/api/kernels/{kernel_id}").status_code == 404
        _run_in(server, kernel_id, code)
        assert entry.exists()
    finally:
        assert server.client.delete(f"/api/kernels/{kernel_id}").status_code == 204
    assert server.get(f"/durable/api/kernels/{kernel_id}").status_code == 404
    assert store_key(other) not in [s["key"] for s in server.get("/durable/api/stores").json()["stores"]]
    assert server.get(api(run_id), params={"store": store_key(other)}).status_code == 404
    disconnect(other)


def test_a_registry_entry_of_a_kernel_the_server_does_not_run_is_ignored(
    served: tuple[JupyterServer, str], tmp_path: Path
) -> None:
    """An entry another process planted (a kernel id this server never started, or an entry of a
    process that is gone) serves nothing: 404, and its store is not served."""
    server, _ = served
    planted = f"sqlite:///{tmp_path}/planted.db"
    run_id = paused_run(planted)
    stranger = "0d5e6f70-1111-2222-3333-444455556666"
    server.runtime.mkdir(exist_ok=True)
    entry = {"kernel_id": stranger, "run_id": run_id, "store": planted, "pid": os.getpid()}
    (server.runtime / f"durable-nb-kernel-{stranger}.json").write_text(json.dumps(entry))
    assert server.get(f"/durable/api/kernels/{stranger}").status_code == 404
    kernel_id = _start_kernel(server)
    try:
        gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        dead = {"kernel_id": kernel_id, "run_id": run_id, "store": planted, "pid": int(gone.stdout)}
        (server.runtime / f"durable-nb-kernel-{kernel_id}.json").write_text(json.dumps(dead))
        answer = server.get(f"/durable/api/kernels/{kernel_id}")
        assert answer.status_code == 404
        assert answer.json()["error"] == "KernelNotAttached"
        assert store_key(planted) not in [s["key"] for s in server.get("/durable/api/stores").json()["stores"]]
        assert server.get(api(run_id), params={"store": store_key(planted)}).status_code == 404
    finally:
        server.client.delete(f"/api/kernels/{kernel_id}")
    disconnect(planted)


def test_the_registry_writer_does_nothing_outside_a_jupyter_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside a kernel a Jupyter server started (here: pytest), writing and removing an entry are no-ops."""
    from durable_nb.jupyter.registry import read_kernel_entry, remove_kernel_entry, write_kernel_entry

    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
    write_kernel_entry("some-run", f"sqlite:///{tmp_path}/runs.db")
    remove_kernel_entry()
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "durable-nb-kernel-k1.json").write_text('{"kernel_id": "k1", "run_id": "r", "store": "s", "pid": true}')
    assert read_kernel_entry("k1", runtime_dir=tmp_path) is None
    assert read_kernel_entry("../k1", runtime_dir=tmp_path) is None


# -- as an attacker -----------------------------------------------------------------------------


def test_requests_without_jupyters_token_are_refused(served: tuple[JupyterServer, str]) -> None:
    """No token: the API answers 403 and the page sends to Jupyter's login; nothing is decided."""
    server, url = served
    run_id = paused_run(url)
    with httpx.Client(base_url=server.url, timeout=60) as stranger:
        assert stranger.get("/durable/api/stores").status_code == 403
        assert stranger.get(api(run_id), params={"store": store_key(url)}).status_code == 403
        posted = stranger.post(api(run_id, "/gates/publish"), params={"store": store_key(url)}, json={"approved": True})
        assert posted.status_code == 403
        page = stranger.get("/durable/approvals")
        assert page.status_code == 302
        assert "/login" in page.headers["location"]
        assert "publish?" not in page.text
    assert decisions(url, run_id) == []


def test_a_cookie_session_cannot_post_without_jupyters_xsrf_token(served: tuple[JupyterServer, str]) -> None:
    """A signed-in browser's POST without _xsrf (what a page elsewhere would send): 403, nothing decided."""
    server, url = served
    run_id = paused_run(url)
    with server.session() as browser:
        assert browser.get("/durable/api/stores").status_code == 200  # signed in: only the token is missing
        posted = browser.post(api(run_id, "/gates/publish"), params={"store": store_key(url)}, json={"approved": True})
        assert posted.status_code == 403
        assert "_xsrf" in posted.text
        browser.get("/durable/approvals")  # sets the _xsrf cookie; a cross-site form still cannot read it
        form = {"store": store_key(url), "run": run_id, "node": "publish", "approved": "true"}
        assert browser.post("/durable/approvals/decide", data=form).status_code == 403
        forged = browser.post("/durable/approvals/decide", data={**form, "_xsrf": "2|00000000|" + "0" * 32 + "|1"})
        assert forged.status_code == 403
    assert decisions(url, run_id) == []


def test_a_cross_origin_request_is_refused(served: tuple[JupyterServer, str]) -> None:
    """A request naming another Origin, even with the session's _xsrf: refused, nothing decided."""
    server, url = served
    run_id = paused_run(url)
    with server.session() as browser:
        browser.get("/durable/approvals")
        xsrf = browser.cookies["_xsrf"]
        evil = {"Origin": "http://evil.example", "X-XSRFToken": xsrf}
        read = browser.get("/durable/api/stores", headers={"Origin": "http://evil.example"})
        assert read.status_code in (403, 404)
        posted = browser.post(
            api(run_id, "/gates/publish"), params={"store": store_key(url)}, json={"approved": True}, headers=evil
        )
        assert posted.status_code in (403, 404)
        form = {"_xsrf": xsrf, "store": store_key(url), "run": run_id, "node": "publish", "approved": "true"}
        paged = browser.post("/durable/approvals/decide", data=form, headers={"Origin": "http://evil.example"})
        assert paged.status_code in (403, 404)
    assert decisions(url, run_id) == []


@pytest.mark.parametrize(
    "key", ["0123456789abcdef", "", "../../etc/passwd", "sqlite:////etc/passwd.db", "x" * 5000], ids=repr
)
def test_an_unknown_store_key_is_404_and_names_no_path(served: tuple[JupyterServer, str], key: str) -> None:
    """A key the server does not serve (or a path or URL in its place): 404 StoreNotServed (400 when
    missing), the served stores' paths never in the answer, no file opened or created."""
    server, url = served
    run_id = paused_run(url)
    answer = server.get(api(run_id), params={"store": key})
    assert answer.status_code == (400 if key == "" else 404)
    body = answer.json()
    assert body["error"] == ("InvalidInput" if key == "" else "StoreNotServed")
    assert str(server.folder) not in answer.text
    assert not Path("/etc/passwd.db").exists()


@pytest.mark.parametrize(
    "run_id",
    ["no-such-run", "../../etc/passwd", "run'\"<script>", "é∂ƒ", "%00", "a" * 3000, ". .", "x;DROP TABLE runs"],
    ids=range(8),
)
def test_odd_run_ids_are_not_found_never_a_server_error(served: tuple[JupyterServer, str], run_id: str) -> None:
    """Run ids with odd characters (encoded in the path): 404 RunNotFound as JSON, for reads and decisions."""
    server, url = served
    key = store_key(url)
    for answer in (
        server.get(api(run_id), params={"store": key}),
        server.get(api(run_id, "/version"), params={"store": key}),
        server.post(api(run_id, "/gates/publish"), params={"store": key}, json={"approved": True}),
    ):
        assert answer.status_code == 404, answer.text
        assert answer.json()["error"] == "RunNotFound"
        assert "<script>" not in answer.headers.get("content-type", "")


@pytest.mark.parametrize("node", ["nope", "publish/../x", "<img src=x onerror=alert(1)>", "é", "%2e%2e"], ids=range(5))
def test_odd_gate_nodes_decide_nothing(served: tuple[JupyterServer, str], node: str) -> None:
    """A node name with odd characters: 404 UnknownGate, the run's real gate still waits."""
    server, url = served
    run_id = paused_run(url)
    answer = server.post(
        api(run_id, "/gates/" + quote(node, safe="")), params={"store": store_key(url)}, json={"approved": True}
    )
    assert answer.status_code == 404, answer.text
    assert answer.json()["error"] == "UnknownGate"
    assert decisions(url, run_id) == []


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"x" * (2 << 20), "InvalidInput"),
        (b"not json", "InvalidInput"),
        (b"\xff\xfe", "InvalidInput"),
        (b"[" * 100_000, "InvalidInput"),
        (b'{"approved": "yes"}', "InvalidDecision"),
        (b'{"approved": 1}', "InvalidDecision"),
        (b'{"comment": "no verdict"}', "InvalidDecision"),
        (b'{"approved": true, "by": "the CEO"}', "InvalidDecision"),
        (b'{"approved": true, "comment": ["a"]}', "InvalidDecision"),
        (b"[true]", "InvalidDecision"),
    ],
    ids=["too-large", "not-json", "not-utf8", "deep", "yes", "one", "no-verdict", "forged-by", "list-comment", "list"],
)
def test_a_bad_decision_body_is_a_typed_400(served: tuple[JupyterServer, str], body: bytes, error: str) -> None:
    """Bodies too large, not JSON, or not a decision: 400 with the error's type; nothing decided."""
    server, url = served
    run_id = paused_run(url)
    answer = server.post(api(run_id, "/gates/publish"), params={"store": store_key(url)}, content=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == error
    assert answer.json()["message"]
    assert decisions(url, run_id) == []


def test_a_bad_stale_body_is_a_typed_400(served: tuple[JupyterServer, str]) -> None:
    """The stale endpoint reads only its own shape."""
    server, url = served
    run_id = paused_run(url)
    for body in ({"cells": "all"}, {"cells": [{"cell_id": 1, "node": "a", "source": ""}]}, {"cells": [], "more": 1}):
        answer = server.post(api(run_id, "/stale"), params={"store": store_key(url)}, json=body)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"] == "InvalidInput"


def test_the_approvals_page_has_strict_headers_and_escapes_gates(served: tuple[JupyterServer, str]) -> None:
    """The page: no script allowed, no framing, no sniffing, no cache; a gate's reason and context shown
    as text, never as markup."""
    server, url = served
    reason = "<script>alert('reason')</script>"
    run_id = paused_run(url, reason, {"note": "<img src=x onerror=alert('context')>", "'quote'": '"dq"'})
    page = server.get("/durable/approvals")
    assert page.status_code == 200
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy
    assert "frame-ancestors 'none'" in policy
    assert "script-src" not in policy
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["content-type"].startswith("text/html")
    assert "<script" not in page.text
    assert "<img" not in page.text
    assert "&lt;script&gt;alert(&#x27;reason&#x27;)&lt;/script&gt;" in page.text
    assert "&lt;img src=x onerror=alert(&#x27;context&#x27;)&gt;" in page.text
    assert f"data-run='{run_id}'" in page.text
    # The API gives the same text as data, for the panel to show as text.
    shown = server.get(api(run_id), params={"store": store_key(url)}).json()
    assert shown["gates"][0]["reason"] == reason
    assert server.get("/durable/api/stores").headers["content-type"].startswith("application/json")


def test_store_labels_never_show_a_password() -> None:
    """A store's label is its URL without the password, in the address or in the query."""
    assert store_label("postgresql://ana:s3cret@db.example:5432/runs") == "postgresql://ana@db.example:5432/runs"
    assert "s3cret" not in store_label("postgresql://ana@db/runs?password=s3cret&schema=x")
    assert store_label("sqlite:////srv/runs.db") == "sqlite:////srv/runs.db"
    assert store_key("sqlite:///rel/runs.db") == store_key(f"sqlite:///{os.getcwd()}/rel/runs.db")
    assert re.fullmatch(r"[0-9a-f]{16}", store_key(None))


def test_the_server_stops_cleanly_and_closes_its_stores(tmp_path: Path) -> None:
    """Stopping the server runs the extension's stop hook (its stores closed) and exits 0."""
    url = f"sqlite:///{tmp_path}/runs.db"
    run_id = paused_run(url)
    server = JupyterServer(tmp_path, options=[f"--DurableNB.store={url}"])
    assert server.get(api(run_id), params={"store": store_key(url)}).status_code == 200
    server.stop()
    assert server.process.returncode == 0
    assert "durable_nb: closed 1 store" in server.output()
    disconnect(url)


# -- in a browser ---------------------------------------------------------------------------------


def test_approve_from_the_approvals_page_in_a_browser(served: tuple[JupyterServer, str], tmp_path: Path) -> None:
    """Chromium: sign in to Jupyter with its token, open /durable/approvals, Approve; the page's style
    applies under its policy, hostile context stays text, and the decision is recorded once."""
    from browserkit import chromium, require_browser, screenshot_path

    require_browser()
    server, url = served
    hostile = "<script>window.pwned = 1</script>"
    run_id = paused_run(url, "ship the report?", {"summary": hostile})
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1100, "height": 700})
        page.goto(f"{server.url}/durable/approvals")
        assert "/login" in page.url  # no sign-in, no page
        page.goto(f"{server.url}/durable/approvals?token={TOKEN}")
        gate = page.locator(f"section.gate[data-run='{run_id}']")
        gate.wait_for()
        assert "ship the report?" in gate.inner_text() and hostile in gate.inner_text()
        assert page.evaluate("window.pwned") is None
        approve = gate.get_by_role("button", name="Approve")
        assert approve.evaluate("b => getComputedStyle(b).backgroundColor") == "rgb(31, 122, 61)"
        page.screenshot(path=screenshot_path(tmp_path, "jupyter-approvals-page.png"), full_page=True)
        gate.locator("textarea").fill("looks right")
        approve.click()
        page.get_by_text(f"Approved run {run_id}").wait_for()
    recorded = decisions(url, run_id)
    assert [(d["approved"], d["comment"]) for d in recorded] == [(True, "looks right")]


def test_installing_enables_the_extension_and_ships_the_front_end() -> None:
    """Packaging: the wheel's server config enables the module Jupyter finds the extension in, and its
    shared data puts the prebuilt front end where JupyterLab looks for durable-nb."""
    from durable_nb.jupyter import _jupyter_server_extension_points

    root = Path(__file__).resolve().parent.parent
    config = json.loads((root / "jupyter-config/server-config/durable_nb.json").read_text())
    module = _jupyter_server_extension_points()[0]["module"]
    assert config == {"ServerApp": {"jpserver_extensions": {module: True}}}
    project = tomllib.loads((root / "pyproject.toml").read_text())
    shared = project["tool"]["hatch"]["build"]["targets"]["wheel"]["shared-data"]
    assert shared["jupyter-config/server-config"] == "etc/jupyter/jupyter_server_config.d"
    assert shared["durable_nb/labextension"] == "share/jupyter/labextensions/durable-nb"
    assert json.loads((root / "install.json").read_text())["packageName"] == project["project"]["name"]
    builder = project["tool"]["hatch"]["build"]["hooks"]["jupyter-builder"]
    assert builder["optional-editable-build"] is True
    assert builder["build-kwargs"]["path"] == "labextension"


# -- a front end that was never built -----------------------------------------------------------------


def bare_environment(folder: Path) -> str:
    """A virtual environment of its own (so Jupyter's labextensions folders are its, and empty) that imports
    this environment's packages; return its Python."""
    venv.EnvBuilder(with_pip=False).create(folder)
    python = folder / "bin" / "python"
    found = subprocess.run(
        [python, "-c", "import site; print(site.getsitepackages()[0])"], capture_output=True, text=True, check=True
    )
    # `import` lines of a .pth run: these packages, with their own .pth files, but not their data folders.
    lines = "".join(f"import site; site.addsitedir({path!r})\n" for path in site.getsitepackages())
    (Path(found.stdout.strip()) / "here.pth").write_text(lines)
    return str(python)


def wait_for_log(server: JupyterServer, text: str) -> None:
    """Wait until the server's log holds ``text`` (it starts logging before it answers, so it is there)."""
    assert server.get("/api/status").status_code == 200
    assert text in server.output(), server.output()[-3000:]


def test_the_front_end_is_found_by_its_build_not_by_the_install_note(tmp_path: Path) -> None:
    """A labextensions folder counts only when it holds the build (package.json): an install that skipped
    the build leaves install.json alone."""
    skipped = tmp_path / "skipped"
    (skipped / LABEXTENSION).mkdir(parents=True)
    (skipped / LABEXTENSION / "install.json").write_text("{}")
    built = tmp_path / "built"
    (built / LABEXTENSION).mkdir(parents=True)
    (built / LABEXTENSION / "package.json").write_text("{}")
    assert installed_front_end([str(tmp_path / "none"), str(skipped)]) is None
    assert installed_front_end([str(skipped), str(built)]) == built / LABEXTENSION


def test_a_server_without_the_front_end_says_why_in_one_log_line(tmp_path: Path) -> None:
    """Where no labextensions folder holds the build (an editable install without Node), the server
    extension still loads and logs one warning line saying what is missing and how to build it; with the
    build on $JUPYTER_PATH, it says nothing of the kind."""
    python = bare_environment(tmp_path / "env")
    env = {"JUPYTER_DATA_DIR": str(tmp_path / "data"), "JUPYTER_PATH": ""}
    (tmp_path / "without").mkdir()
    server = JupyterServer(tmp_path / "without", env=env, python=python)
    try:
        wait_for_log(server, MISSING_FRONT_END)
        assert server.output().count(MISSING_FRONT_END) == 1
        assert server.get("/durable/api/stores").status_code == 200
    finally:
        server.stop()
    data = tmp_path / "share" / "labextensions" / LABEXTENSION
    data.mkdir(parents=True)
    (data / "package.json").write_text(json.dumps({"name": LABEXTENSION}))
    (tmp_path / "with").mkdir()
    server = JupyterServer(tmp_path / "with", env={**env, "JUPYTER_PATH": str(tmp_path / "share")}, python=python)
    try:
        assert server.get("/durable/api/stores").status_code == 200
        assert "durable_nb: JupyterLab will show" not in server.output()
    finally:
        server.stop()


def front_end_note(root: Path, version: str) -> list[str]:
    """Run the project's build hook (hatch_build.py) for the wheel target in ``root``; return its warnings."""
    pytest.importorskip("hatchling", reason="the build hook runs in hatchling (pip install hatchling)")
    import importlib.util
    import warnings

    spec = importlib.util.spec_from_file_location(
        "hatch_build", Path(__file__).resolve().parent.parent / "hatch_build.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    hook = module.FrontEndNote(str(root), {}, None, None, str(root / "dist"), "wheel")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hook.initialize(version, {})
    return [str(w.message) for w in caught]


def test_an_editable_install_left_without_the_front_end_says_so_in_one_line(tmp_path: Path) -> None:
    """The build hook after the front end's: an editable install without the build warns in one line (pip
    shows a backend's warnings without -v); with the build, or for a release wheel, it says nothing."""
    notes = front_end_note(tmp_path, "editable")
    assert len(notes) == 1 and "\n" not in notes[0], notes
    assert "without its JupyterLab front end" in notes[0] and "Node" in notes[0]
    assert front_end_note(tmp_path, "standard") == []
    built = tmp_path / "durable_nb" / "labextension"
    built.mkdir(parents=True)
    (built / "package.json").write_text("{}")
    assert front_end_note(tmp_path, "editable") == []
    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
    hooks = list(project["tool"]["hatch"]["build"]["hooks"])
    # It reads what the front end's hook left: it runs after it.
    assert hooks.index("custom") > hooks.index("jupyter-builder"), hooks
