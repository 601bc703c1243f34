"""Real Jupyter kernels: kill -9, restart, Run All again; gates, @idempotent calls, interrupts."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import env_with_repo
from kernelkit import Kernel

import durable_nb as dnb

# Real kernels on SQLite, but for one PostgreSQL case (the store is tested on both elsewhere).
pytestmark = [pytest.mark.slow, pytest.mark.backends("sqlite")]


@pytest.fixture
def kernels(tmp_path: Path, store_url: str) -> Iterator[list[Kernel]]:
    started: list[Kernel] = []

    def start() -> Kernel:
        kernel = Kernel(tmp_path, env={"DURABLE_NB_STORE": store_url})
        started.append(kernel)
        return kernel

    started.append(start)  # type: ignore[arg-type]
    yield started
    for kernel in started[1:]:
        kernel.close()


def new_kernel(kernels: list) -> Kernel:
    return kernels[0]()


def counts(path: Path) -> dict[str, int]:
    names = path.read_text().split() if path.exists() else []
    return {name: names.count(name) for name in names}


def notebook(counter: Path, flag: Path) -> list[str]:
    bump = f"open({str(counter)!r}, 'a').write('{{}}\\n')"
    return [
        "%load_ext durable_nb\n%durable run crash-nb",
        f"%%durable load\n{bump.format('load')}\nrows = list(range(10))\nprint('loaded', len(rows))",
        f"%%durable square\n{bump.format('square')}\nsquares = [r * r for r in rows]\nsum(squares)",
        (
            f"%%durable crash\n{bump.format('crash')}\nimport os, pathlib\n"
            f"flag = pathlib.Path({str(flag)!r})\n"
            "if not flag.exists():\n    flag.touch()\n    os.kill(os.getpid(), 9)\n"
            "total = sum(squares)"
        ),
        f"%%durable after\n{bump.format('after')}\ndone = total + 1\nprint('done', done)",
        "%durable end",
    ]


@pytest.mark.backends("sqlite", "postgres")  # the one PostgreSQL case of a real kernel
def test_kill_then_run_all_restores_committed_cells(kernels: list, tmp_path: Path, store_url: str) -> None:
    """After kill -9, Run All in a new kernel restores committed cells, replays outputs and runs only the rest."""
    counter, flag = tmp_path / "counter.txt", tmp_path / "flag"
    cells = notebook(counter, flag)
    first = new_kernel(kernels)
    results = first.run_all(cells)
    assert [r.status for r in results][:3] == ["ok", "ok", "ok"]
    assert not first.manager.is_alive()
    assert counts(counter) == {"load": 1, "square": 1, "crash": 1}

    second = new_kernel(kernels)
    results = second.run_all(cells)
    assert [r.status for r in results] == ["ok"] * len(cells), [r.text for r in results]
    assert "2 cells restorable (load, square)" in results[0].text
    assert counts(counter) == {"load": 1, "square": 1, "crash": 2, "after": 1}
    assert "loaded 10" in results[1].text and "restored 'load'" in results[1].text
    assert "285" in results[2].text  # the cell's result is shown again
    assert "done 286" in results[4].text
    run = dnb.runs(store=store_url).iloc[0]
    assert run["status"] == "completed"


def test_gate_approved_from_another_process_then_rerun(kernels: list, tmp_path: Path, store_url: str) -> None:
    """A gate pauses Run All; another process approves; a new kernel's Run All continues to the end."""
    cells = [
        "%load_ext durable_nb\nimport durable_nb as dnb\n%durable run gated",
        "%%durable draft\ntext = 'Dear customer, …'",
        "%%durable review\nd = dnb.gate('send?', {'text': text})\napproved = d.approved\nreviewer = d.by",
        "%%durable send\nresult = f'sent by {reviewer}' if approved else 'held'\nprint(result)",
        "%durable end",
    ]
    first = new_kernel(kernels)
    results = first.run_all(cells)
    assert [r.status for r in results] == ["ok", "ok", "error"]
    assert results[2].error == "GatePending"
    assert "Traceback" not in results[2].text
    run_id = dnb.runs(store=store_url)["run_id"].iloc[0]
    assert dnb.get_run(run_id, store=store_url).status == "paused"
    first.close()
    kernels.remove(first)

    approver = subprocess.run(
        [sys.executable, "-c", f"import durable_nb as dnb; dnb.approve({run_id!r}, by='zoe', store={store_url!r})"],
        env=env_with_repo(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert approver.returncode == 0, approver.stderr
    second = new_kernel(kernels)
    results = second.run_all(cells)
    assert [r.status for r in results] == ["ok"] * len(cells), [r.text for r in results]
    assert "sent by zoe" in results[3].text
    assert dnb.get_run(run_id, store=store_url).status == "completed"


def test_panel_click_inside_the_kernel(kernels: list, store_url: str) -> None:
    """A simulated click on the panel's Approve button records the decision and continues the cell."""
    kernel = new_kernel(kernels)
    assert kernel.run("%load_ext durable_nb\nimport durable_nb as dnb\n%durable run clicks").status == "ok"
    paused = kernel.run("%%durable review\nd = dnb.gate('ship?', {'n': 3})\nshipped = d.approved")
    assert paused.error == "GatePending"
    click = kernel.run(
        "from durable_nb.notebook.session import session_for\n"
        "s = session_for(get_ipython())\n"
        "p = s.gate_panel(s.cell_run.run_id, 'review', 'ship?', {'n': 3})\n"
        "p.approve_button.click()\n"
        "print(shipped, p.status.value)"
    )
    assert click.status == "ok", click.text
    assert "True" in click.text and "Approved" in click.text


def test_idempotent_loop_killed_at_call_12(kernels: list, tmp_path: Path) -> None:
    """A cell making 20 @idempotent calls is killed at call 12; re-running executes only calls 12 to 20."""
    calls = tmp_path / "calls.txt"
    flag = tmp_path / "killed"
    setup = (
        "%load_ext durable_nb\nimport durable_nb as dnb, os, pathlib\n%durable run mailer\n"
        "@dnb.idempotent\n"
        "def send(i):\n"
        f"    open({str(calls)!r}, 'a').write(f'{{i}}\\n')\n"
        f"    if i == 12 and not pathlib.Path({str(flag)!r}).exists():\n"
        f"        pathlib.Path({str(flag)!r}).touch()\n"
        "        os.kill(os.getpid(), 9)\n"
        "    return i * 10\n"
    )
    loop = "%%durable mail\nreceipts = [send(i) for i in range(1, 21)]\nsum(receipts)"
    first = new_kernel(kernels)
    first.run_all([setup, loop])
    assert calls.read_text().split() == [str(i) for i in range(1, 13)]
    second = new_kernel(kernels)
    results = second.run_all([setup, loop])
    assert results[-1].status == "ok", results[-1].text
    assert "2100" in results[-1].text
    assert calls.read_text().split() == [str(i) for i in range(1, 13)] + [str(i) for i in range(12, 21)]


def test_interrupt_cancels_the_cell(kernels: list, store_url: str) -> None:
    """Interrupting the kernel during a durable cell cancels it (uncommitted); the run resumes."""
    kernel = new_kernel(kernels)
    assert kernel.run("%load_ext durable_nb\n%durable run waits").status == "ok"
    result = kernel.interrupt_after("%%durable wait\nimport time\npartial = 1\ntime.sleep(30)\nfinished = True", 1.5)
    assert result.error == "KeyboardInterrupt"
    run_id = dnb.runs(store=store_url)["run_id"].iloc[0]
    run = dnb.get_run(run_id, store=store_url)
    assert run.status == "cancelled" and run.error == "Cancelled by user"
    assert "partial" not in run.state
    assert kernel.run("%%durable wait\npartial = 1\nfinished = True").status == "ok"
    assert dnb.get_run(run_id, store=store_url).status == "running"


def test_rich_values_survive_a_new_kernel(kernels: list) -> None:
    """A DataFrame, a numpy array, a function and a class defined in a durable cell come back in a new kernel."""
    cells = [
        "%load_ext durable_nb\n%durable run values",
        (
            "%%durable define\nimport numpy as np, pandas as pd\n"
            "frame = pd.DataFrame({'a': [1, 2, 3], 'b': ['x', 'y', 'z']})\n"
            "array = np.arange(12).reshape(3, 4)\n"
            "def triple(v):\n    return 3 * v\n"
            "class Point:\n    def __init__(self, x):\n        self.x = x\n"
            "    def norm(self):\n        return abs(self.x)\n"
            "origin = Point(-4)"
        ),
    ]
    first = new_kernel(kernels)
    assert [r.status for r in first.run_all(cells)] == ["ok", "ok"]
    first.kill()
    second = new_kernel(kernels)
    assert [r.status for r in second.run_all(cells)] == ["ok", "ok"]
    check = second.run(
        "print(frame['a'].sum(), frame['b'].tolist(), array.sum(), triple(5), Point(7).norm(), origin.norm())"
    )
    assert check.text.strip() == "6 ['x', 'y', 'z'] 66 15 7 4"


def test_hundred_megabyte_dataframe(kernels: list, tmp_path: Path) -> None:
    """A cell defining a 100 MB DataFrame commits, and restores in a new kernel (times printed)."""
    cells = [
        "%load_ext durable_nb\nimport time\n%durable run big",
        (
            "%%durable make\nimport numpy as np, pandas as pd\n"
            "frame = pd.DataFrame(np.random.default_rng(7).random((1_250_000, 10)))\n"
            "checksum = float(frame.to_numpy().sum())"
        ),
    ]
    timed = "start = time.perf_counter()\n" + cells[1].split("\n", 1)[1]
    first = new_kernel(kernels)
    assert first.run(cells[0]).status == "ok"
    plain = first.run(timed + "\nprint(time.perf_counter() - start)")
    compute = float(plain.text.split()[-1])
    committed = first.run(
        "start = time.perf_counter()\n"
        + "get_ipython().run_cell_magic('durable', 'make', "
        + repr(cells[1].split("\n", 1)[1])
        + ")\nprint(time.perf_counter() - start)"
    )
    assert committed.status == "ok", committed.text
    commit_seconds = float(committed.text.split()[-1]) - compute
    checksum = float(first.run("print(checksum)").text)
    first.kill()
    second = new_kernel(kernels)
    assert second.run(cells[0]).status == "ok"
    restored = second.run(
        "start = time.perf_counter()\n"
        + "get_ipython().run_cell_magic('durable', 'make', "
        + repr(cells[1].split("\n", 1)[1])
        + ")\nprint(time.perf_counter() - start)"
    )
    assert restored.status == "ok", restored.text
    restore_seconds = float(restored.text.split()[-1])
    assert "restored 'make'" in restored.text
    assert float(second.run("print(float(frame.to_numpy().sum()))").text) == checksum
    assert second.run("print(frame.memory_usage().sum() >= 100_000_000)").text.strip() == "True"
    print(f"\n100 MB DataFrame: commit overhead {commit_seconds:.2f} s, restore {restore_seconds:.2f} s")


def test_click_arriving_as_a_comm_message(kernels: list, store_url: str) -> None:
    """A click sent by the front end (a comm message, handled between cells) records and continues."""
    import time

    kernel = new_kernel(kernels)
    assert kernel.run("%load_ext durable_nb\nimport durable_nb as dnb\n%durable run comm-click").status == "ok"
    assert kernel.run("%%durable review\nd = dnb.gate('ship?')\nshipped = d.approved").error == "GatePending"
    found = kernel.run(
        "from ipywidgets.widgets.widget import _instances\n"
        "from durable_nb.widgets.gate_panel import GatePanel\n"
        "panel = [w for w in list(_instances.values()) if isinstance(w, GatePanel)][-1]\n"
        "print(panel.approve_button.model_id)"
    )
    button = found.text.strip()
    client = kernel.client
    message = client.session.msg(
        "comm_msg", {"comm_id": button, "data": {"method": "custom", "content": {"event": "click"}}}
    )
    client.shell_channel.send(message)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        check = kernel.run("print(globals().get('shipped'), panel.status.value)")
        if "True" in check.text:
            break
        time.sleep(0.2)
    assert "True" in check.text and "Approved" in check.text, check.text
    run_id = dnb.runs(store=store_url)["run_id"].iloc[0]
    assert dnb.get_run(run_id, store=store_url).status == "running"
