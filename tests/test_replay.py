"""Replays: a notebook run forked before one cell with a sweep of values, the rest run in background
kernels from the code the run committed, while the user's kernel stays where it is; kills of the
background kernels, of the process owning them and of the user's kernel lose no committed cell."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernelkit import Kernel

import durable_nb as dnb
from durable_nb._ids import parse_owner
from durable_nb.cli import main
from durable_nb.engine.runs.ownership import owner_alive
from durable_nb.headless.replay_worker import default_jobs

pytestmark = pytest.mark.backends("sqlite")

REPLAY = "%durable replay --at cell-train --sweep rate=0.5,2.0,3.0"


def _cells(log: Path, block: Path) -> list[tuple[str, str]]:
    """(cell id, source) of a small notebook; each cell appends a line to ``log`` when its code runs."""
    bump = f"open({str(log)!r}, 'a').write"
    return [
        ("setup", "%load_ext durable_nb\n%durable run sweep-demo --all"),
        ("load", f"{bump}('load\\n')\nrate = 1.0\nbase = 10"),
        ("train", f"{bump}(f'train {{rate}}\\n')\nscore = base * rate"),
        (
            "slow",
            f"import os, time\n{bump}(f'slow {{rate}}\\n')\n"
            f"while os.path.exists({str(block)!r}):\n    time.sleep(0.05)\nchecked = True",
        ),
        ("report", f"{bump}(f'report {{rate}}\\n')\nresult = score * 2"),
    ]


def _lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def _wait_for(condition, what: str, timeout: float = 120) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _forks(store_url: str) -> list[dnb.Run]:
    runs = dnb.runs("sweep-demo", store=store_url)
    return [
        dnb.get_run(run_id, store=store_url)
        for run_id in runs["run_id"]
        if dnb.get_run(run_id, store=store_url).parent_run_id
    ]


def _pid(owner: str) -> int:
    return parse_owner(owner)[1]


@pytest.fixture
def kernels(tmp_path: Path, store_url: str) -> Iterator[list[Kernel]]:
    started: list[Kernel] = []
    yield started
    for kernel in started:
        kernel.close()


def _start(started: list[Kernel], folder: Path, store_url: str) -> Kernel:
    # As Jupyter's server starts a notebook's kernel: the notebook file is known.
    kernel = Kernel(folder, env={"DURABLE_NB_STORE": store_url, "JPY_SESSION_NAME": str(folder / "sweep.ipynb")})
    started.append(kernel)
    return kernel


def _write_notebook(path: Path, cells: list[tuple[str, str]]) -> None:
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source, id=cell_id) for cell_id, source in cells]
    nbformat.write(notebook, str(path))


def _run_notebook(kernel: Kernel, cells: list[tuple[str, str]]) -> None:
    for cell_id, source in cells:
        result = kernel.run(source, cell_id=cell_id)
        assert result.status == "ok", result.text


@pytest.mark.slow
def test_sweep_replays_in_background_kernels_and_survives_kills(
    kernels: list[Kernel], tmp_path: Path, store_url: str
) -> None:
    """Three forks from cell train: nothing before it runs again, each fork has its own values, the user's
    kernel is untouched and shows a bar per fork; the replays go on when the user's kernel dies; killing a
    fork's kernel or the process owning the kernels loses nothing committed, and the same command (from a
    new kernel) continues the same forks."""
    log, block = tmp_path / "log.txt", tmp_path / "block"
    cells = _cells(log, block)
    _write_notebook(tmp_path / "sweep.ipynb", cells)
    user = _start(kernels, tmp_path, store_url)
    _run_notebook(user, cells)
    assert _lines(log) == ["load", "train 1.0", "slow 1.0", "report 1.0"]
    original = next(iter(dnb.runs("sweep-demo", store=store_url)["run_id"]))

    # The forks wait in cell slow until the test lets them go; the command returns at once all the same.
    block.touch()
    started = user.run(REPLAY)
    assert started.status == "ok", started.text
    assert "replaying run" in started.text and "differ" not in started.text
    # As many forks run at once as there are cores; the others wait their turn.
    at_once = min(3, default_jobs())
    _wait_for(lambda: _count(log, "slow ") == 1 + at_once, "forks in cell slow")
    forks = _forks(store_url)
    assert len(forks) == 3 and {fork.parent_run_id for fork in forks} == {original}
    # The user's kernel is where it was, its values and its run; its bars moved while it was idle.
    assert "1.0 10.0 20.0" in user.run("print(rate, score, result)").text
    _wait_for(lambda: _bar_moved(user), "a bar at 1 cell done")
    assert _lines(log).count("load") == 1

    # The user's kernel dies, then one fork's kernel mid-cell: the others go on, and finish.
    held = [r for r in (_record(store_url, f.id) for f in forks) if r.owner]
    assert len(held) == at_once
    killed = held[0].run_id
    user.kill()
    os.kill(_pid(held[0].owner), signal.SIGKILL)
    _wait_for(lambda: not _alive(store_url, killed), "the fork's kernel gone")
    block.unlink()
    others = [f.id for f in forks if f.id != killed]
    _wait_for(lambda: all(_record(store_url, i).status.value == "completed" for i in others), "the others done")

    # A new kernel: Run All restores the notebook (its own run, not a fork); the same command continues the
    # killed fork. The process owning its kernel is killed in turn, mid-cell, and the command run again.
    again = _start(kernels, tmp_path, store_url)
    _run_notebook(again, cells)
    assert _lines(log).count("load") == 1 and _lines(log).count("report 1.0") == 1
    block.touch()
    assert again.run(REPLAY).status == "ok"
    rate = _record(store_url, killed).meta["replay"]["values"]["rate"]
    _wait_for(lambda: _count(log, f"slow {rate}") == 2, "the killed fork in cell slow again")
    os.kill(_parent(_pid(_record(store_url, killed).owner)), signal.SIGKILL)
    _wait_for(lambda: not _alive(store_url, killed), "the fork's kernel gone with its process")
    block.unlink()
    # The notebook file changed meanwhile: the replay says so, and runs the code the run committed.
    _write_notebook(tmp_path / "sweep.ipynb", [*cells[:-1], ("report", cells[-1][1].replace("* 2", "* 3"))])
    resumed = again.run(REPLAY + " --wait")
    assert resumed.status == "ok", resumed.text
    assert "cell-report in sweep.ipynb differs" in resumed.text
    after = _forks(store_url)
    assert {f.id for f in after} == {f.id for f in forks}
    assert {f.status for f in after} == {"completed"}
    lines = _lines(log)
    assert lines.count("load") == 1  # nothing before the fork point ran in any fork
    for value in (0.5, 2.0, 3.0):
        assert lines.count(f"train {value}") == 1  # committed before the kills: restored, never run again
        assert lines.count(f"slow {value}") == (3 if value == rate else 1)  # killed twice mid-cell: run again
        assert lines.count(f"report {value}") == 1
    results = {f.state["rate"]: (f.state["score"], f.state["result"]) for f in after}
    assert results == {0.5: (5.0, 10.0), 2.0: (20.0, 40.0), 3.0: (30.0, 60.0)}

    # The same command once more returns the same forks and runs nothing.
    before = _lines(log)
    same = again.run(
        "import durable_nb as dnb\nforks = dnb.replay(at='cell-train', sweep={'rate': [0.5, 2.0, 3.0]}, wait=True)\n"
        "print(sorted(f.id for f in forks))"
    )
    assert same.status == "ok", same.text
    assert str(sorted(f.id for f in forks)) in same.text
    assert "cannot be stored" not in same.text  # the Run handles are committed with the cell
    assert _lines(log) == before
    assert len(_forks(store_url)) == 3


def _count(log: Path, prefix: str) -> int:
    return sum(line.startswith(prefix) for line in _lines(log))


def _alive(store_url: str, run_id: str) -> bool:
    record = _record(store_url, run_id)
    return owner_alive(record.run_id, record.owner, record.lease_until)


def _bar_moved(kernel: Kernel) -> bool:
    """True once the kernel sent a bar's update to 1 cell done (read while running a cell that commits nothing)."""
    kernel.run("%durable notes on")
    return any(m.get("method") == "update" and m.get("state", {}).get("value") == 1 for m in kernel.comm_messages)


def _record(store_url: str, run_id: str):  # type: ignore[no-untyped-def]
    from durable_nb._loop import run_sync
    from durable_nb.store import connect

    return run_sync(connect(store_url).get_run(run_id))


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


@pytest.mark.backends("sqlite", "postgres")
def test_bad_input_is_refused_and_creates_nothing(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown cell, a value of another type, an empty sweep, a run with no committed cell: InvalidReplay,
    and no fork made."""
    from shellkit import Shell

    shell = Shell(store_url, "bad-replay")
    try:
        shell.run_all("%%durable base\nrate = 0.5\nlabel = 'a'", "%%durable price\nprice = 100 * rate")
        run_id = shell.run_id
        empty = Shell(store_url, "nothing-yet")
        nothing = empty.run_id
        empty.close()
    finally:
        shell.close()
    before = len(dnb.runs(store=store_url))
    cases = [
        ({"at": "nope"}, "No cell 'nope'"),
        ({"at": "price", "set": {"rate": "fast"}}, "rate is float"),
        ({"at": "price", "sweep": {"label": ["b", 3]}}, "label is str"),
        ({"at": "price", "sweep": {"rate": []}}, "has no values"),
        ({"at": "price", "sweep": {"rate": 0.5}}, "takes a list of values"),
        ({"at": "price", "set": {"rate": 1}, "sweep": {"rate": [2]}}, "both set and swept"),
    ]
    for arguments, message in cases:
        with pytest.raises(dnb.InvalidReplay, match=message):
            dnb.replay(run=run_id, store=store_url, **arguments)
    with pytest.raises(dnb.InvalidReplay, match="no committed cell"):
        dnb.replay(at="price", run=nothing, store=store_url)
    with pytest.raises(dnb.InvalidReplay, match="No run to replay"):
        dnb.replay(at="price", store=store_url)  # no kernel attached here, and no run given
    assert main(["replay", run_id, "--at", "nope", "--store", store_url]) != 0
    assert "No cell 'nope'" in capsys.readouterr().err
    assert len(dnb.runs(store=store_url)) == before


@pytest.mark.slow
@pytest.mark.backends("sqlite", "postgres")
def test_a_gate_pauses_its_fork_until_decided(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A gate in a replayed cell pauses that fork (a paused run, as the panel and inspector show it); once
    decided, the same call continues the fork after the gate, here as a task of a real Dask cluster."""
    from distributed import Client, LocalCluster
    from shellkit import gated_run

    run_id = gated_run(store_url, "gated")
    # From the command line: the same forks as from Python.
    capsys.readouterr()
    code = main(["replay", run_id, "--at", "review", "--sweep", "rate=2.0", "--wait", "--json", "--store", store_url])
    [shown] = json.loads(capsys.readouterr().out)
    assert code == 0 and shown["status"] == "paused" and shown["values"] == {"rate": 2.0}
    fork = dnb.get_run(shown["run_id"], store=store_url)
    assert fork.pending_interrupt["node_id"] == "review"
    assert fork.pending_interrupt["context"] == {"rate": 2.0}
    dnb.approve(fork.id, store=store_url)
    # A scheduler and one worker in this process (the replay itself runs in the kernel the task starts).
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as executor,
    ):
        [again] = dnb.replay(
            at="review", sweep={"rate": [2.0]}, run=run_id, store=store_url, wait=True, executor=executor
        )
    assert again.id == fork.id and again.status == "completed"
    assert again.state["published"] == 2.0


def test_sweep_text_is_read_as_literals_never_run() -> None:
    """``name=v1,v2`` is a list of Python literals: tuples stay one value, code is refused."""
    from durable_nb.engine.forks.literals import parse_sweep

    assert parse_sweep("rate=0.1, 0.01") == ("rate", [0.1, 0.01])
    assert parse_sweep("shape=(1, 2),(3, 4)") == ("shape", [(1, 2), (3, 4)])
    assert parse_sweep("label='a','b'") == ("label", ["a", "b"])
    assert parse_sweep("rate=") == ("rate", [])  # refused as an empty sweep when the replay is made
    for bad in ("rate", "2x=1", "__class__=1", "rate=__import__('os').getpid()", "rate=1], [2"):
        with pytest.raises(dnb.InvalidInput):
            parse_sweep(bad)


def _priced_run(store_url: str, name: str) -> str:
    """Commit a two-cell notebook run (``base`` sets ``rate``, ``price`` uses it) in a shell; return its id."""
    from shellkit import Shell

    shell = Shell(store_url, name)
    try:
        shell.run_all("%%durable base\nrate = 0.5", "%%durable price\nprice = 100 * rate")
        return shell.run_id
    finally:
        shell.close()


def test_a_fork_that_cannot_start_says_why(store_url: str) -> None:
    """A fork whose kernel cannot start is marked failed with the reason, not left pending without a word."""
    from durable_nb.engine.cells.replay_runs import start_replay

    run_id = _priced_run(store_url, "no-kernel")
    started = start_replay(store_url, run_id, "price", {"rate": 1.0}, kernel="no-such-kernel")
    started.wait()
    [fork] = started.runs()
    assert fork.status == "failed" and "NoSuchKernel" in (fork.error or "")


def test_a_replay_process_that_dies_fails_its_forks_saying_what_it_printed(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process owning a replay's kernels ends in error before replaying anything: its forks fail
    with its exit code and the end of its output (kept in a log of this user's), not left pending
    without a word; the same replay asked for again runs them."""
    from durable_nb.engine.cells import replay_runs
    from durable_nb.engine.cells.replay_runs import start_replay

    run_id = _priced_run(store_url, "dying-worker")
    broken = [sys.executable, "-c", "import sys; print('cannot reach the kernels'); sys.exit(3)"]
    with monkeypatch.context() as patched:
        patched.setattr(replay_runs, "_command", lambda *args: broken)  # the injected failure
        started = start_replay(store_url, run_id, "price", sweep={"rate": [1.0, 2.0]})
        started.wait()
    forks = started.runs()
    assert [fork.status for fork in forks] == ["failed", "failed"]
    for fork in forks:
        assert "exited with code 3" in (fork.error or "") and "cannot reach the kernels" in (fork.error or "")
    assert started.log is not None and started.log.parent.stat().st_mode & 0o777 == 0o700

    again = start_replay(store_url, run_id, "price", sweep={"rate": [1.0, 2.0]})
    again.wait()
    assert [fork.status for fork in again.runs()] == ["completed", "completed"]
    assert again.worker is not None and again.worker.wait(timeout=120) == 0
    assert again.log is not None and not again.log.exists()  # a clean exit leaves no log behind


def test_a_dead_replay_process_fails_each_fork_once_when_asked_from_many_threads(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A progress widget's thread and the caller both ask whether a replay finished: a process that died
    has its unsettled forks marked failed once each, not once per asker."""
    import threading

    from durable_nb.engine.cells import replay_runs
    from durable_nb.engine.cells.replay_runs import start_replay

    run_id = _priced_run(store_url, "asked-twice")
    broken = [sys.executable, "-c", "import sys; sys.exit(4)"]
    with monkeypatch.context() as patched:
        patched.setattr(replay_runs, "_command", lambda *args: broken)  # the injected failure
        started = start_replay(store_url, run_id, "price", sweep={"rate": [1.0, 2.0]})
        assert started.worker is not None and started.worker.wait(timeout=120) == 4
    progress = started.progress()
    askers = 8
    together = threading.Barrier(askers)
    answers: list[bool] = []

    def ask() -> None:
        together.wait()
        answers.append(started.finished(progress))

    threads = [threading.Thread(target=ask) for _ in range(askers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == [True] * askers
    from durable_nb._loop import run_sync
    from durable_nb.store import connect

    store = connect(store_url)
    for fork in started.runs():
        failures = [event for event in run_sync(store.list_events(fork.id)) if event.type == "run_failed"]
        assert fork.status == "failed" and len(failures) == 1, failures


@pytest.mark.slow
def test_a_replayed_cell_keeps_its_options(store_url: str, tmp_path: Path) -> None:
    """A replayed cell runs with the options it was committed with: ``--retries`` retries it in the fork,
    ``--exclude`` keeps its name out of the fork's checkpoint."""
    from shellkit import Shell

    from durable_nb._loop import run_sync
    from durable_nb.engine.cells.replays import replay_cells
    from durable_nb.engine.state.values import ValueCodec
    from durable_nb.headless.replay_kernel import magic_line
    from durable_nb.store import connect
    from durable_nb.store.secret import load_secret

    tries = tmp_path / "tries"
    # Fails on its first attempt for each rate: only a retry gets it through.
    price = (
        "%%durable price --retries 1 --timeout 60 --exclude big\n"
        f"import os\nmark = os.path.join({str(tmp_path)!r}, f'tried-{{rate}}')\n"
        f"open({str(tries)!r}, 'a').write(f'{{rate}}\\n')\n"
        "if not os.path.exists(mark):\n    open(mark, 'w').close()\n    raise RuntimeError('first attempt')\n"
        "big = [rate] * 3\nprice = 100 * rate"
    )
    shell = Shell(store_url, "options")
    try:
        shell.run_all("%%durable base\nrate = 0.5", price)
        run_id = shell.run_id
    finally:
        shell.close()
    assert _lines(tries) == ["0.5", "0.5"]
    [fork] = dnb.replay(at="price", set={"rate": 2.0}, run=run_id, store=store_url, wait=True)
    assert fork.status == "completed", fork.error
    assert _lines(tries) == ["0.5", "0.5", "2.0", "2.0"]  # failed once, retried, committed
    assert fork.state["price"] == 200.0 and "big" not in fork.state
    store = connect(store_url)
    cells = run_sync(replay_cells(store, ValueCodec(store, load_secret()), _record(store_url, fork.id)))
    assert [magic_line(cell) for cell in cells] == [
        "%%durable base",
        "%%durable price --retries 1 --timeout 60.0 --exclude big",
    ]


@pytest.mark.slow
def test_a_fork_decided_while_its_replay_runs_continues_there(store_url: str, tmp_path: Path) -> None:
    """The replay's process continues a fork whose gate is decided while it still replays another fork;
    nobody runs the replay again."""
    from shellkit import Shell

    from durable_nb.engine.cells.replay_runs import start_replay

    block = tmp_path / "block"
    gated = "%%durable review\nimport durable_nb as dnb\nd = dnb.gate('go?', {'rate': rate}) if rate > 1 else None"
    slow = (
        f"%%durable slow\nimport os, time\nwhile rate < 0.5 and os.path.exists({str(block)!r}):\n"
        "    time.sleep(0.05)\nok = d is None or d.approved\ndone = rate if ok else None"
    )
    shell = Shell(store_url, "decided-while-running")
    try:
        shell.run_all("%%durable base\nrate = 0.5", gated, slow)
        run_id = shell.run_id
    finally:
        shell.close()
    block.touch()
    started = start_replay(store_url, run_id, "review", sweep={"rate": [2.0, 0.25]}, jobs=2)
    gated_fork, slow_fork = started.run_ids
    _wait_for(lambda: _record(store_url, gated_fork).status.value == "paused", "the fork to pause at its gate")
    dnb.approve(gated_fork, store=store_url)
    _wait_for(lambda: _record(store_url, gated_fork).status.value == "completed", "the decided fork to continue")
    assert started.worker is not None and started.worker.poll() is None  # still replaying the other fork
    assert _record(store_url, slow_fork).status.value == "running"
    assert dnb.get_run(gated_fork, store=store_url).state["done"] == 2.0
    block.unlink()
    started.wait()
    assert dnb.get_run(slow_fork, store=store_url).state["done"] == 0.25


def test_a_kernel_attached_in_another_store_gives_no_default_run(tmp_path: Path, store_url: str) -> None:
    """``dnb.replay(at=…, store=S)`` in a kernel whose run lives in another store does not take that run's id
    to S: it says there is no run to replay there, and creates nothing."""
    from IPython.core.interactiveshell import InteractiveShell

    dnb.connect(store_url)
    InteractiveShell.clear_instance()  # a shell of its own, not one another test left attached
    shell = InteractiveShell.instance()
    try:
        shell.run_line_magic("load_ext", "durable_nb")
        shell.run_line_magic("durable", f"run elsewhere --store sqlite:///{tmp_path}/elsewhere.db")
        assert shell.run_cell("%%durable base\nrate = 1").success
        assert shell.run_cell("%%durable double\ny = rate * 2").success
        with pytest.raises(dnb.InvalidReplay, match="No run to replay"):
            dnb.replay(at="double", store=store_url)
        assert len(dnb.runs(store=store_url)) == 0
        [fork] = dnb.replay(at="double", set={"rate": 5}, wait=True)  # in its own store: the kernel's run
        assert fork.status == "completed" and fork.state["y"] == 10
        assert shell.user_ns["y"] == 2
    finally:
        InteractiveShell.clear_instance()
