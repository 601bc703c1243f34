"""The sync API works in a plain script, inside a running event loop and from threads."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from conftest import env_with_repo

import durable_nb as dnb


def make_flow(store_url: str) -> dnb.Workflow:
    flow = dnb.Workflow("sync-api", store=store_url)

    @flow.node()
    def first(state):
        return {"a": 1}

    @flow.node(after="first")
    async def second(state):
        await asyncio.sleep(0)
        return {"b": state["a"] + 1}

    @flow.node(after="second")
    def third(state):
        return {"ok": dnb.gate("ok?").approved}

    return flow


def test_sync_calls_inside_a_running_loop(store_url: str) -> None:
    """Sync calls made on a thread whose loop is running (as in a Jupyter cell) just work."""
    flow = make_flow(store_url)

    async def cell() -> dnb.Run:
        run = flow.run({})
        assert run.status == "paused"
        assert dnb.get_run(run.id, store=store_url).status == "paused"
        return flow.approve(run.id)

    done = asyncio.run(cell())
    assert done.status == "completed"
    assert done.state == {"a": 1, "b": 2, "ok": True}


def test_async_twins(store_url: str) -> None:
    """run, resume, approve, fork, cancel have async twins."""
    flow = make_flow(store_url)

    async def main() -> None:
        run = await flow.arun({})
        assert run.status == "paused"
        done = await flow.aapprove(run.id)
        assert done.status == "completed"
        fork = await flow.afork(run.id, state={"a": 10})
        assert fork.status == "completed" and fork.state["a"] == 10
        other = await flow.arun({})
        cancelled = await flow.acancel(other.id)
        assert cancelled.status == "cancelled"
        resumed = await flow.aresume(other.id)
        assert resumed.status == "paused"
        decided = await dnb.areject(other.id, store=store_url)
        assert decided.status == "pending"
        final = await flow.aresume(other.id)
        assert final.state["ok"] is False
        created = await dnb.afork(run.id, store=store_url)
        assert created.status == "pending"
        fetched = await dnb.aget_run(created.id, store=store_url)
        assert (await fetched.astate())["b"] == 2
        frame = await dnb.ahistory(run.id, store=store_url)
        assert frame["step"].iloc[-1] == "run_end"

    asyncio.run(main())


def test_sync_calls_from_threads(store_url: str) -> None:
    """Several threads drive runs through the same store at once."""
    flow = make_flow(store_url)
    results: list[str] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            run = flow.run({})
            results.append(flow.approve(run.id).status)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert results == ["completed"] * 6


def test_plain_script_exits_cleanly(store_url: str, tmp_path: Path) -> None:
    """A script that never closes its store still exits (no hanging connection thread)."""
    script = tmp_path / "script.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import durable_nb as dnb
            flow = dnb.Workflow("script", store={store_url!r})

            @flow.node()
            def only(state):
                return {{"done": True}}

            print(flow.run({{}}).status)
            """
        )
    )
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env_with_repo()
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "completed"
