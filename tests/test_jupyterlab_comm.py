"""The kernel's side of the JupyterLab extension, in real kernels: the `durable_nb` comm and the registry file.

A front end opens a comm to the target ``durable_nb``; the kernel answers with a snapshot and then
tells it of every durable cell that starts and how it ends, and of every run it attaches to. The
registry file tells the Jupyter server which run and store a kernel it started works in.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kernelkit import Kernel

import durable_nb as dnb
from durable_nb.jupyter.stores import store_key

pytestmark = pytest.mark.backends("sqlite")

SETUP = "%load_ext durable_nb\n%durable run demo"


KERNEL_ID = "5f0c1d9e-6a57-4bb1-9d3e-2c8a0e7b4f21"


@pytest.fixture
def kernel(tmp_path: Path, store_url: str) -> Iterator[Kernel]:
    """A kernel started as a Jupyter server starts one: its connection file is kernel-<id>.json in a runtime folder."""
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    env = {"DURABLE_NB_STORE": store_url, "JUPYTER_RUNTIME_DIR": str(runtime)}
    started = Kernel(tmp_path, env=env, connection_file=runtime / f"kernel-{KERNEL_ID}.json")
    try:
        yield started
    finally:
        started.close()


def messages(kernel: Kernel, kind: str) -> list[dict[str, Any]]:
    """The comm messages of one type the kernel sent so far (after a cell that makes sure they arrived)."""
    assert kernel.run("pass").status == "ok"
    return [m for m in kernel.comm_messages if m["type"] == kind]


@pytest.mark.backends("sqlite", "postgres")
def test_a_front_end_gets_a_snapshot_then_each_cell_as_it_starts_and_ends(kernel: Kernel, store_url: str) -> None:
    """Open a comm after a cell committed: the snapshot holds the run and that cell; later cells are
    pushed as running, then committed (with when, how long and the bytes stored), restored or failed."""
    assert kernel.run(SETUP).status == "ok"
    assert kernel.run("%%durable load\nrows = list(range(1000))", cell_id="cell-a").status == "ok"
    kernel.open_comm("durable_nb", {"type": "hello"})
    [snapshot] = messages(kernel, "snapshot")
    run = dnb.runs("demo", store=store_url).iloc[0]
    assert snapshot["run"] == {
        "run_id": run["run_id"],
        "name": "demo",
        "status": "running",
        "parent_run_id": None,
        "store_key": store_key(store_url),
    }
    assert snapshot["all"] is False
    assert list(snapshot["cells"]) == ["cell-a"]
    load = snapshot["cells"]["cell-a"]
    assert (load["node"], load["state"], load["run_id"], load["gate"]) == ("load", "committed", run["run_id"], None)
    assert load["bytes"] > 1000 and load["duration"] >= 0 and load["at"] > 0

    assert kernel.run("%%durable total\ntotal = sum(rows)", cell_id="cell-b").status == "ok"
    assert kernel.run("%%durable load\nrows = list(range(1000))", cell_id="cell-a").status == "ok"
    assert kernel.run("%%durable broken\n1 / 0", cell_id="cell-c").status == "error"
    cells = [(m["cell"]["cell_id"], m["cell"]["node"], m["cell"]["state"]) for m in messages(kernel, "cell")]
    assert cells == [
        ("cell-b", "total", "running"),
        ("cell-b", "total", "committed"),
        ("cell-a", "load", "restored"),
        ("cell-c", "broken", "running"),
        ("cell-c", "broken", "failed"),
    ]
    restored = next(m["cell"] for m in messages(kernel, "cell") if m["cell"]["state"] == "restored")
    assert restored["at"] == load["at"] and restored["duration"] == load["duration"]
    assert set(restored) == {"cell_id", "node", "state", "run_id", "at", "duration", "bytes", "gate"}


def test_a_paused_cell_names_its_gate_and_the_end_of_the_run_detaches(kernel: Kernel) -> None:
    """A cell at a gate reads paused with the gate's reason; %durable end sends a run of null."""
    assert kernel.run(SETUP).status == "ok"
    kernel.open_comm("durable_nb", {"type": "hello"})
    gate = "%%durable review\nimport durable_nb as dnb\nok = dnb.gate('publish?', {'rows': 3})"
    assert kernel.run(gate, cell_id="cell-g").status == "error"
    paused = [m["cell"] for m in messages(kernel, "cell")][-1]
    assert (paused["cell_id"], paused["state"], paused["gate"]) == ("cell-g", "paused", "publish?")
    assert kernel.run("%durable approve").status == "ok"
    assert kernel.run("%durable end").status == "ok"
    assert messages(kernel, "run")[-1] == {"type": "run", "run": None, "all": False}


def test_switch_moves_the_kernel_to_a_fork_and_an_unknown_run_is_an_error(kernel: Kernel, store_url: str) -> None:
    """A front end's switch attaches the kernel to that run (a run message follows); a wrong id answers an error."""
    assert kernel.run(SETUP).status == "ok"
    comm = kernel.open_comm("durable_nb", {"type": "hello"})
    assert kernel.run("%%durable load\nx = 1", cell_id="cell-a").status == "ok"
    original = dnb.runs("demo", store=store_url).iloc[0]["run_id"]
    fork = dnb.fork(original, store=store_url).id
    kernel.send_comm(comm, {"type": "switch", "run_id": fork})
    assert messages(kernel, "run")[-1]["run"]["run_id"] == fork
    assert messages(kernel, "run")[-1]["run"]["parent_run_id"] == original
    kernel.send_comm(comm, {"type": "switch", "run_id": "no-such-run"})
    [error] = messages(kernel, "error")
    assert "no-such-run" in error["message"]
    kernel.send_comm(comm, {"type": "cell-info", "cell_id": "cell-a", "tags": ["load"]})
    assert kernel.run("%%durable load\nx = 1", cell_id="cell-a").status == "ok"


def test_no_comm_message_while_no_front_end_listens(kernel: Kernel) -> None:
    """Durable cells, attaching and ending send nothing when no front end opened a comm."""
    assert kernel.run(SETUP).status == "ok"
    assert kernel.run("%%durable load\nrows = [1, 2]", cell_id="cell-a").status == "ok"
    assert kernel.run("%%durable load\nrows = [1, 2]", cell_id="cell-a").status == "ok"
    assert kernel.run("%durable end").status == "ok"
    assert kernel.comm_messages == []


def test_the_registry_file_names_the_run_and_store_and_goes_at_exit(
    kernel: Kernel, tmp_path: Path, store_url: str
) -> None:
    """A kernel with a Jupyter connection file writes durable-nb-kernel-<id>.json (0600) and removes it at exit."""
    entry = tmp_path / "runtime" / f"durable-nb-kernel-{KERNEL_ID}.json"
    assert kernel.run("%load_ext durable_nb").status == "ok"
    assert not entry.exists()  # loading attaches nothing
    assert kernel.run(SETUP).status == "ok"
    written = json.loads(entry.read_text())
    run_id = dnb.runs("demo", store=store_url).iloc[0]["run_id"]
    assert written == {"kernel_id": KERNEL_ID, "run_id": run_id, "store": store_url, "pid": kernel.pid}
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    assert kernel.run("%durable run other --new").status == "ok"
    assert json.loads(entry.read_text())["run_id"] == dnb.runs("other", store=store_url).iloc[0]["run_id"]
    kernel.manager.shutdown_kernel(now=False)
    assert not entry.exists()


def test_the_run_message_says_when_every_cell_runs_durably(kernel: Kernel) -> None:
    """`%durable run NAME --all` and `%durable off` reach the front end as the run message's `all`."""
    assert kernel.run(SETUP).status == "ok"
    kernel.open_comm("durable_nb", {"type": "hello"})
    assert kernel.run("%durable run demo --all").status == "ok"
    assert messages(kernel, "run")[-1]["all"] is True
    assert kernel.run("%durable off").status == "ok"
    assert messages(kernel, "run")[-1]["all"] is False
