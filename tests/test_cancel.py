"""Cancel: from this thread, another thread or another process; the node in flight is abandoned."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from conftest import env_with_repo

import durable_nb as dnb

LONG_FLOW = """
import asyncio, os, sys, time
import durable_nb as dnb

flow = dnb.Workflow("long", store={store!r})
MARK = {mark!r}


def note(text):
    with open(MARK, "a") as handle:
        handle.write(text + "\\n")


def pauses():
    # Until the test's release file exists, when it names one; else STEP_SECONDS at once.
    release = os.environ.get("RELEASE_FILE")
    if release is None:
        yield float(os.environ.get("STEP_SECONDS", "30"))
        return
    while not os.path.exists(release):
        yield 0.05


@flow.node(retry_count=0)
def prepare(state):
    return {{"prepared": True}}


if {is_async}:
    @flow.node(after="prepare", retry_count=0)
    async def long_step(state):
        note("started")
        for pause in pauses():
            await asyncio.sleep(pause)
        note("finished")
        return {{"result": "late"}}
else:
    @flow.node(after="prepare", retry_count=0)
    def long_step(state):
        note("started")
        for pause in pauses():
            time.sleep(pause)
        note("finished")
        return {{"result": "late"}}


@flow.node(after="long_step", retry_count=0)
def after_step(state):
    return {{"after": state["result"]}}


if __name__ == "__main__":
    run = flow.run({{}})
    print(run.status, run.error, flush=True)
"""


def write_flow(tmp_path: Path, store_url: str, is_async: bool) -> tuple[Path, Path]:
    module = tmp_path / f"long_flow_{'async' if is_async else 'sync'}.py"
    mark = tmp_path / "mark.txt"
    module.write_text(LONG_FLOW.format(store=store_url, mark=str(mark), is_async=is_async))
    return module, mark


def wait_for(predicate, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        time.sleep(0.02)


def load(module: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"{module.stem}_{time.monotonic_ns()}", module)
    assert spec and spec.loader
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


@pytest.mark.parametrize("is_async", [False, True], ids=["sync-node", "async-node"])
def test_cancel_from_another_process_abandons_the_node(tmp_path: Path, store_url: str, is_async: bool) -> None:
    """A cancel from another process stops a running run mid-node; the result is never committed."""
    module, mark = write_flow(tmp_path, store_url, is_async)
    env = env_with_repo()
    # The node goes on until the test releases it, after the cancel: however slow the machine,
    # the cancel lands while the node is in flight.
    release = tmp_path / "release"
    env["RELEASE_FILE"] = str(release)
    runner = subprocess.Popen([sys.executable, str(module)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        wait_for(lambda: mark.exists() and "started" in mark.read_text())
        run_id = dnb.runs(store=store_url)["run_id"].iloc[0]
        canceller = subprocess.run(
            [
                sys.executable,
                "-c",
                f"import durable_nb as dnb; print(dnb.cancel({run_id!r}, store={store_url!r}).status)",
            ],
            capture_output=True,
            text=True,
            env=env_with_repo(),
            timeout=60,
        )
        assert canceller.stdout.strip() == "cancelled", canceller.stderr
        release.touch()  # the abandoned node may end now: its late result must still never be committed
        out, _ = runner.communicate(timeout=60)
    finally:
        runner.kill()
    assert out.startswith("cancelled Cancelled by user")
    run = dnb.get_run(run_id, store=store_url)
    assert run.status == "cancelled" and run.error == "Cancelled by user"
    assert "result" not in run.state
    assert list(dnb.history(run_id, store=store_url)["step"]) == ["after:prepare"]

    # Resumable: the node runs again (quickly this time) and the run completes.
    os.environ["STEP_SECONDS"] = "0"
    try:
        flow = load(module).flow
        done = flow.resume(run_id)
    finally:
        del os.environ["STEP_SECONDS"]
    assert done.status == "completed"
    assert done.state["after"] == "late"
    assert mark.read_text().count("started") == 2


def test_cancel_from_another_thread(store_url: str) -> None:
    """Cancel from another thread of the same process stops the node at once."""
    flow = dnb.Workflow("threads", store=store_url)
    started = threading.Event()
    release = threading.Event()
    late: list[str] = []

    @flow.node(retry_count=0)
    def wait_step(state):
        started.set()
        release.wait(10)
        late.append("returned")
        return {"late": True}

    results: list[dnb.Run] = []
    worker = threading.Thread(target=lambda: results.append(flow.run({})))
    worker.start()
    assert started.wait(10)
    run_id = dnb.runs(store=store_url)["run_id"].iloc[0]
    begun = time.monotonic()
    assert dnb.cancel(run_id, store=store_url).status == "cancelled"
    worker.join(10)
    assert not worker.is_alive()
    assert time.monotonic() - begun < 5  # stopped without waiting for the node
    release.set()
    assert results[0].status == "cancelled"
    time.sleep(0.2)
    assert late == ["returned"]  # the abandoned body finished later …
    assert "late" not in dnb.get_run(run_id, store=store_url).state  # … and was discarded


def test_cancel_settles_a_paused_run(store_url: str) -> None:
    """Cancelling a paused run settles its gate; it stays resumable and asks again."""
    flow = dnb.Workflow("paused", store=store_url)

    @flow.node()
    def review(state):
        return {"ok": dnb.gate("ok?").approved}

    run = flow.run({})
    cancelled = flow.cancel(run.id)
    assert cancelled.status == "cancelled"
    assert cancelled.pending_interrupt is None
    with pytest.raises(dnb.AlreadyResumed):
        dnb.approve(run.id, store=store_url)
    assert flow.resume(run.id).status == "paused"


def test_cancelling_a_finished_run_raises(store_url: str) -> None:
    """A completed or failed run cannot be cancelled."""
    flow = dnb.Workflow("finished", store=store_url)

    @flow.node(retry_count=0)
    def only(state):
        if state.get("fail"):
            raise ValueError("no")
        return {}

    done = flow.run({})
    with pytest.raises(dnb.NotCancellable, match="completed"):
        dnb.cancel(done.id, store=store_url)
    failed = flow.run({"fail": True})
    with pytest.raises(dnb.NotCancellable, match="failed"):
        dnb.cancel(failed.id, store=store_url)


def test_ctrl_c_cancels_the_run(tmp_path: Path, store_url: str) -> None:
    """Interrupting the process (SIGINT) cancels the node; the run reads cancelled and resumes."""
    module, mark = write_flow(tmp_path, store_url, False)
    script = tmp_path / "interrupt.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import signal, sys
            # A process started from a background job inherits SIGINT ignored; a terminal's has it.
            signal.signal(signal.SIGINT, signal.default_int_handler)
            sys.path.insert(0, {str(tmp_path)!r})
            from {module.stem} import flow
            try:
                flow.run({{}})
            except KeyboardInterrupt:
                print("interrupted", flush=True)
            """
        )
    )
    env = env_with_repo()
    env["STEP_SECONDS"] = "30"
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        wait_for(lambda: mark.exists() and "started" in mark.read_text())
        child.send_signal(2)
        out, _ = child.communicate(timeout=30)
    finally:
        child.kill()
    assert out.strip() == "interrupted"
    run = dnb.get_run(dnb.runs(store=store_url)["run_id"].iloc[0], store=store_url)
    assert run.status == "cancelled"
    assert run.error == "Cancelled by user"
