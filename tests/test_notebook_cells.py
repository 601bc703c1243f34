"""%%durable cells in a real IPython shell: commit, restore, failure, fork on edit, gates, the magics."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

import durable_nb as dnb
from durable_nb._loop import run_sync


class Kernel:
    """A fresh IPython shell with the extension loaded, and helpers to run cells."""

    def __init__(self, store_url: str, counter: Path) -> None:
        self.shell = InteractiveShell()
        self.store_url = store_url
        self.counter = counter
        self.shell.run_line_magic("load_ext", "durable_nb")
        self.shell.user_ns["COUNTER"] = str(counter)
        self.shell.user_ns["bump"] = _bump

    def run(self, source: str) -> Any:
        return self.shell.run_cell(source)

    def ok(self, source: str) -> Any:
        result = self.run(source)
        assert result.success, result.error_in_exec or result.error_before_exec
        return result.result

    @property
    def ns(self) -> dict[str, Any]:
        return self.shell.user_ns

    def runs(self) -> list[str]:
        return self.counter.read_text().split() if self.counter.exists() else []


def _bump(path: str, name: str) -> None:
    with open(path, "a") as handle:
        handle.write(name + "\n")


@pytest.fixture
def kernel(store_url: str, tmp_path: Path) -> Iterator[Kernel]:
    k = Kernel(store_url, tmp_path / "counter.txt")
    k.ok(f"%durable run analysis --store {store_url}")
    yield k


def fresh(kernel: Kernel) -> Kernel:
    """A second kernel on the same store, as after a restart."""
    other = Kernel(kernel.store_url, kernel.counter)
    session = _session(kernel)
    if session.cell_run is not None:
        run_sync(session.cell_run.release())
    other.ok(f"%durable run analysis --store {kernel.store_url}")
    return other


def _session(kernel: Kernel) -> Any:
    from durable_nb.notebook.session import session_for

    return session_for(kernel.shell)


LOAD = """%%durable load
bump(COUNTER, "load")
import math
rows = [1, 2, 3, 4]
print("loaded", len(rows), "rows")
len(rows)
"""

CLEAN = """%%durable clean
bump(COUNTER, "clean")
cleaned = [r * 10 for r in rows]
total = sum(cleaned)
"""


def test_commit_then_restore_without_running(kernel: Kernel, capsys: pytest.CaptureFixture[str]) -> None:
    """A committed cell restores its values and replays its output without executing."""
    assert kernel.ok(LOAD) == 4
    kernel.ok(CLEAN)
    assert kernel.runs() == ["load", "clean"]
    capsys.readouterr()

    other = fresh(kernel)
    other.ok(LOAD)
    other.ok(CLEAN)
    out = capsys.readouterr()
    assert kernel.runs() == ["load", "clean"]  # nothing ran again
    assert other.ns["rows"] == [1, 2, 3, 4]
    assert other.ns["total"] == 100
    assert other.ns["math"].pi > 3  # modules come back too
    assert "loaded 4 rows" in out.out  # the print is replayed
    assert "durable_nb: restored 'load' from checkpoint" in out.out  # a note, not stderr (issue 18 item 6)
    assert "took" in out.out and out.err == ""


def test_names_found_by_syntax(kernel: Kernel) -> None:
    """Assignments, imports, def/class, walrus, for/with targets are committed; IPython's names are not.

    COUNTER, read by the cell and never stored before, is stored with it: durable_nb cannot know
    whether the cell changed it."""
    kernel.ok(
        """%%durable names
import json as js
from os import path
def area(r):
    return 3.14 * r * r
class Box:
    size = 2
for i in range(3):
    last = i
with open(COUNTER, "a") as handle:
    pass
if (n := 7) > 3:
    big = True
a, (b, c) = 1, (2, 3)
_private = "kept"
"""
    )
    history = dnb.history(_session(kernel).cell_run.run_id, store=kernel.store_url)
    changed = set(history["changed"].iloc[-1])
    assert changed == {"js", "path", "area", "Box", "i", "last", "n", "big", "a", "b", "c", "_private", "COUNTER"}
    # An open file cannot be stored: it is named as unstored instead.
    checkpoint = run_sync(dnb.connect(kernel.store_url).head_checkpoint(_session(kernel).cell_run.run_id))
    assert checkpoint.extra["unstored"] == {"handle": "_io.TextIOWrapper"}


def test_set_up_calls_are_judged_one_by_one(kernel: Kernel) -> None:
    """A set-up call is named as an effect a restore cannot make again unless a setting durable_nb
    reads covers that very call: not the library it goes into, not another change in the cell.
    A method of a variable changes the variable (stored as such); a call in a branch may not
    have run, so what it would set is not read."""
    kernel.ok(
        """%%durable setup
import logging, sys
import numpy as np, matplotlib.dates as mdates
from sklearn.linear_model import LogisticRegression
model = LogisticRegression()
model.set_params(C=2.0)
log = logging.getLogger("dnb.test.setup")
log.setLevel(log.level)
np.random.set_state(np.random.get_state())
sys.setrecursionlimit(sys.getrecursionlimit())
if not model:
    mdates.set_epoch("2000-01-01T00:00:00")
"""
    )
    checkpoint = run_sync(dnb.connect(kernel.store_url).head_checkpoint(_session(kernel).cell_run.run_id))
    assert checkpoint.extra["effects"] == [
        "sys.setrecursionlimit(sys.getrecursionlimit())",
        'mdates.set_epoch("2000-01-01T00:00:00")',
    ]


def test_unchanged_values_are_not_recommitted(kernel: Kernel) -> None:
    """A later cell commits only what it defined or may have changed, not everything."""
    kernel.ok(LOAD)
    kernel.ok("%%durable report\nsummary = f'{len(rows)} rows'")
    kernel.ok("%%durable grow\nrows.append(5)")
    history = dnb.history(_session(kernel).cell_run.run_id, store=kernel.store_url)
    assert list(history["changed"].iloc[1]) == ["summary"]
    assert list(history["changed"].iloc[2]) == ["rows"]  # mutated through a method call


def test_failing_cell_commits_failed_and_resumes_on_fix(kernel: Kernel) -> None:
    """A failing cell commits failed:<node>, shows its traceback and stops; fixing and re-running resumes."""
    kernel.ok(LOAD)
    result = kernel.run('%%durable divide\nbump(COUNTER, "divide")\nratio = 1 / (len(rows) - 4)')
    assert not result.success
    assert isinstance(result.error_in_exec, ZeroDivisionError)
    run_id = _session(kernel).cell_run.run_id
    run = dnb.get_run(run_id, store=kernel.store_url)
    assert run.status == "failed" and "ZeroDivisionError" in (run.error or "")
    assert list(dnb.history(run_id, store=kernel.store_url)["step"]) == ["after:load", "failed:divide"]

    kernel.ok('%%durable divide\nbump(COUNTER, "divide")\nratio = 1 / len(rows)')
    assert kernel.runs() == ["load", "divide", "divide"]
    assert dnb.get_run(run_id, store=kernel.store_url).status == "running"
    assert kernel.ns["ratio"] == 0.25


def test_edit_forks_the_run(kernel: Kernel, capsys: pytest.CaptureFixture[str]) -> None:
    """A committed cell whose code changed forks the run there; comments and formatting do not count."""
    kernel.ok(LOAD)
    kernel.ok(CLEAN)
    original = _session(kernel).cell_run.run_id
    capsys.readouterr()
    kernel.ok(
        '%%durable clean\n# same code, new comment\nbump(COUNTER,   "clean")\n'
        "cleaned = [r*10 for r in rows]\ntotal = sum(cleaned)"
    )
    assert _session(kernel).cell_run.run_id == original
    assert kernel.runs() == ["load", "clean"]

    kernel.ok('%%durable clean\nbump(COUNTER, "clean")\ncleaned = [r * 100 for r in rows]\ntotal = sum(cleaned)')
    forked = _session(kernel).cell_run.run_id
    assert forked != original
    assert "continuing in fork" in capsys.readouterr().out
    assert kernel.ns["total"] == 1000
    fork_run = dnb.get_run(forked, store=kernel.store_url)
    assert fork_run.parent_run_id == original
    assert dnb.get_run(original, store=kernel.store_url).state["total"] == 100  # the original is intact
    assert kernel.runs() == ["load", "clean", "clean"]

    # In the fork, the cell before the fork point restores from the original run's commit.
    other = fresh(kernel)
    other.ok(LOAD)
    assert kernel.runs() == ["load", "clean", "clean"]


def test_rerun_flag_forks_even_when_unchanged(kernel: Kernel) -> None:
    """--rerun runs a committed cell again in a fork."""
    kernel.ok(LOAD)
    before = _session(kernel).cell_run.run_id
    kernel.ok(LOAD.replace("%%durable load", "%%durable load --rerun"))
    assert kernel.runs() == ["load", "load"]
    assert _session(kernel).cell_run.run_id != before


CONNECT = (
    "%%durable connect\nimport threading, socket\n"
    "lock = threading.Lock()\nsock = socket.socket()\nsettings = {'retries': 3}"
)


def test_unserializable_values_are_named_and_skipped(kernel: Kernel, capsys: pytest.CaptureFixture[str]) -> None:
    """A lock or a socket is named in a warning, not stored, and named again on restore; the rest commits."""
    kernel.ok(CONNECT)
    err = capsys.readouterr().out
    assert "lock" in err and "sock" in err and "cannot be stored" in err
    kernel.ns["sock"].close()
    other = fresh(kernel)
    capsys.readouterr()
    other.ok(CONNECT)
    err = capsys.readouterr().out
    assert other.ns["settings"] == {"retries": 3}
    assert "lock" not in other.ns and "sock" not in other.ns
    assert "not restored" in err and "lock" in err and "--exclude" in err


MAKE_POOL = """%%durable make
import threading
def register(kind):
    bump(COUNTER, "registered")
    return kind

@register
class Pool:
    lock = threading.Lock()
    size = 1

def rebound():
    pass
rebound = threading.Lock()
sizes = [Pool.size for Pool in [Pool]]
"""


def test_what_cannot_be_pickled_is_made_again_from_its_definition(
    kernel: Kernel, capsys: pytest.CaptureFixture[str]
) -> None:
    """A class that cannot be pickled is made again from its definition, decorators included: in
    the kernel that made it, an object still as its cell left it is kept (its decorator does not
    run twice); in a new kernel the decorator runs again, as it ran there. A definition whose name
    the cell rebinds after it is not kept. A change made to the object after its definition is
    named when the cell that made it is restored."""
    kernel.ok(MAKE_POOL)
    checkpoint = run_sync(dnb.connect(kernel.store_url).head_checkpoint(_session(kernel).cell_run.run_id))
    assert set(checkpoint.extra["remade"]) == {"Pool"}
    assert checkpoint.extra["reasons"]["rebound"] == "cannot pickle '_thread.lock' object"
    kernel.ok(MAKE_POOL)  # restored in the kernel that made it
    assert kernel.runs() == ["registered"]
    capsys.readouterr()
    kernel.ok("%%durable grow\nPool.size = 4")
    assert "'grow' changed Pool, which a restore makes again by running its definition" in capsys.readouterr().out
    other = fresh(kernel)
    other.ok(MAKE_POOL)
    assert other.runs() == ["registered", "registered"] and other.ns["Pool"].size == 1
    assert "made Pool again by running its definition" in capsys.readouterr().out
    other.ok("%%durable grow\nPool.size = 4")
    out = capsys.readouterr().out
    assert "Pool is not as cell 'grow' left it" in out and "--replay" in out


def test_a_definition_that_cannot_run_again_is_named(kernel: Kernel, capsys: pytest.CaptureFixture[str]) -> None:
    """A kept definition that fails when run again on restore (its default is a lock, which could
    not be stored) is named with its error and what to do, and so is the lock, with its cause."""
    cell = "%%durable guarded\nimport threading\nguard = threading.Lock()\ndef locked(value=guard):\n    return value"
    kernel.ok(cell)
    capsys.readouterr()
    other = fresh(kernel)
    other.ok(cell)
    out = capsys.readouterr().out
    assert "could not make locked again by running its definition (locked: NameError: name 'guard' is not" in out
    assert "guard (_thread.lock: cannot pickle '_thread.lock' object)" in out and "--replay" in out
    assert "locked" not in other.ns


def test_exclude_keeps_names_out(kernel: Kernel) -> None:
    """--exclude names are never stored."""
    kernel.ok("%%durable conn --exclude handle,scratch,COUNTER\nhandle = open(COUNTER, 'a')\nscratch = 1\nkept = 2")
    kernel.ns["handle"].close()
    changed = set(dnb.history(_session(kernel).cell_run.run_id, store=kernel.store_url)["changed"].iloc[-1])
    assert changed == {"kept"}


def test_top_level_await(kernel: Kernel) -> None:
    """Top-level await inside a %%durable cell works."""
    kernel.ok("%%durable fetch\nimport asyncio\nawait asyncio.sleep(0)\nanswer = await asyncio.sleep(0, result=42)")
    assert kernel.ns["answer"] == 42
    other = fresh(kernel)
    other.ok("%%durable fetch\nimport asyncio\nawait asyncio.sleep(0)\nanswer = await asyncio.sleep(0, result=42)")
    assert other.ns["answer"] == 42


def test_timeout_and_retries(kernel: Kernel) -> None:
    """--timeout stops an overrunning cell; --retries runs it again."""
    result = kernel.run('%%durable slow --timeout 0.3\nimport time\nbump(COUNTER, "slow")\ntime.sleep(5)')
    assert not result.success
    assert isinstance(result.error_in_exec, dnb.NodeTimeout)
    kernel.ok(
        '%%durable flaky --retries 1\nbump(COUNTER, "flaky")\n'
        'if open(COUNTER).read().count("flaky") < 2:\n    raise ConnectionError("first try")\nok = True'
    )
    assert kernel.runs().count("flaky") == 2
    assert kernel.ns["ok"] is True


def test_cells_report_retries_and_timeouts_as_workflow_nodes_do(kernel: Kernel) -> None:
    """Issue 14: a cell's retries are node_retrying events committed with it, and its timeout is the
    NodeTimeout a workflow node gets, from the same attempt policy."""
    kernel.ok(
        '%%durable flaky --retries 2\nbump(COUNTER, "flaky")\n'
        'if open(COUNTER).read().count("flaky") < 3:\n    raise ConnectionError("not yet")\nok = True'
    )
    run_id = _session(kernel).cell_run.run_id
    frame = dnb.events(run_id, store=kernel.store_url)
    flaky = frame[frame["node_id"] == "flaky"]
    assert list(flaky["type"].astype(str)) == ["node_started", "node_retrying", "node_retrying", "node_finished"]
    assert [d["attempt"] for d in flaky[flaky["type"] == "node_retrying"]["data"]] == [1, 2]
    assert {d["error"] for d in flaky[flaky["type"] == "node_retrying"]["data"]} == {"ConnectionError: not yet"}
    history = dnb.history(run_id, store=kernel.store_url)
    assert history[history["step"] == "after:flaky"]["attempts"].iloc[0] == 3

    result = kernel.run("%%durable slow --timeout 0.2 --retries 1\nimport time\ntime.sleep(5)")
    assert isinstance(result.error_in_exec, dnb.NodeTimeout)
    assert str(result.error_in_exec) == "Node 'slow' failed: timed out after 0.2 s"
    frame = dnb.events(run_id, store=kernel.store_url)
    slow = frame[frame["node_id"] == "slow"]
    assert list(slow["type"].astype(str)) == ["node_started", "node_retrying", "node_failed"]


def test_keyboard_interrupt_cancels_the_run(kernel: Kernel) -> None:
    """Interrupting a durable cell cancels the node (uncommitted) and leaves the run resumable."""
    kernel.ok(LOAD)
    result = kernel.run("%%durable stuck\npartial = 1\nraise KeyboardInterrupt")
    assert not result.success
    run_id = _session(kernel).cell_run.run_id
    run = dnb.get_run(run_id, store=kernel.store_url)
    assert run.status == "cancelled" and run.error == "Cancelled by user"
    assert "partial" not in run.state
    kernel.ok("%%durable stuck\npartial = 1")
    assert dnb.get_run(run_id, store=kernel.store_url).status == "running"


def test_gate_pauses_and_approve_continues(kernel: Kernel) -> None:
    """gate() stops the cell without a traceback; a decision continues it; re-running restores it."""
    kernel.ok(LOAD)
    gate_cell = (
        '%%durable review\nbump(COUNTER, "review")\n'
        'd = dnb.gate("publish?", {"rows": len(rows)})\npublished = d.approved'
    )
    kernel.ok("import durable_nb as dnb")
    result = kernel.run(gate_cell)
    assert not result.success
    assert type(result.error_in_exec).__name__ == "GatePending"
    run_id = _session(kernel).cell_run.run_id
    assert dnb.get_run(run_id, store=kernel.store_url).pending_interrupt["context"] == {"rows": 4}

    # Running it again before a decision shows the panel again and pauses again.
    assert not kernel.run(gate_cell).success
    assert kernel.runs().count("review") == 1

    kernel.ok('%durable approve --comment "looks right" --by dana')
    assert kernel.ns["published"] is True
    assert kernel.runs().count("review") == 2
    kernel.ok(gate_cell)  # now committed: restored, not run
    assert kernel.runs().count("review") == 2


def test_decision_from_another_process_then_rerun(kernel: Kernel) -> None:
    """A decision made elsewhere (durable_nb.reject) is picked up when the cell runs again."""
    kernel.ok("import durable_nb as dnb")
    gate_cell = '%%durable review\nd = dnb.gate("publish?")\npublished = d.approved\nwhy = d.comment'
    assert not kernel.run(gate_cell).success
    run_id = _session(kernel).cell_run.run_id
    dnb.reject(run_id, comment="not yet", by="erin", store=kernel.store_url)
    kernel.ok(gate_cell)
    assert kernel.ns["published"] is False and kernel.ns["why"] == "not yet"


def test_gate_panel_click_records_and_continues(kernel: Kernel) -> None:
    """Clicking Approve on the panel records the decision and continues the cell; a second click is refused."""
    from durable_nb.widgets.gate_panel import GatePanel

    kernel.ok("import durable_nb as dnb")
    shown: list[GatePanel] = []
    session = _session(kernel)
    original = session.show_gate
    session.show_gate = lambda *a, **k: shown.append(session.gate_panel(*a, **k)) or original(*a, **k)
    assert not kernel.run('%%durable review\nd = dnb.gate("ship?")\nshipped = d.approved').success
    panel = shown[-1]
    panel.comment.value = "go"
    panel.approve_button.click()
    assert "Approved" in panel.status.value
    assert kernel.ns["shipped"] is True
    assert panel.approve_button.disabled
    twin = session.gate_panel(panel.run_id, "review", "ship?", None)
    assert twin.approve_button.disabled and "Approved" in twin.status.value


def test_misuse_messages(kernel: Kernel, capsys: pytest.CaptureFixture[str]) -> None:
    """Each magic's misuse is a UsageError with what to do, never a traceback."""
    bare = InteractiveShell()
    bare.run_line_magic("load_ext", "durable_nb")
    for line, expected in [
        ("%durable", "takes one of"),
        ("%durable launch", "takes one of"),
        ("%durable switch", "give the run id"),
        ("%durable fork --set 5=x", "name = python literal"),
        ("%durable fork --set rate=__import__('os')", "not a Python literal"),
        ("%%durable\nx = 1", "arguments are required"),
        ("%%durable bad name!\nx = 1", "unrecognized arguments"),
        ("%%durable x --retries -1\ny = 1", "--retries"),
        ("%%durable x --timeout 0\ny = 1", "--timeout"),
        ("%durable run nope --id not-a-run", "No run with id"),
    ]:
        result = kernel.run(line)
        assert not result.success, line
        out = capsys.readouterr()
        assert expected in out.out + out.err, (line, out)
    result = bare.run_cell("%%durable x\ny = 1")
    assert not result.success
    assert "%durable run NAME" in capsys.readouterr().err


def test_live_kernel_owner_is_refused(kernel: Kernel, store_url: str, tmp_path: Path) -> None:
    """Attaching to a run another live kernel owns is refused with a clear message."""
    kernel.ok(LOAD)
    run_id = _session(kernel).cell_run.run_id
    store = dnb.connect(store_url)
    from durable_nb.model import Commit, RunUpdate

    run = run_sync(store.get_run(run_id))
    run_sync(
        store.commit(
            Commit(run_id=run_id, run=RunUpdate(owner=f"{socket.gethostname()}:1:0.x"), expect_owner=run.owner)
        )
    )
    other = Kernel(store_url, tmp_path / "c2.txt")
    result = other.run(f"%durable run analysis --store {store_url}")
    assert not result.success


def test_idempotent_calls_in_cells(kernel: Kernel) -> None:
    """@idempotent calls inside a cell are stored per run: re-running after a failure replays them."""
    kernel.ok(
        "import durable_nb as dnb\n@dnb.idempotent\ndef send(i):\n    bump(COUNTER, f'send{i}')\n    return i * i\n"
    )
    cell = "%%durable mail\nresults = [send(i) for i in range(5)]\nif FAIL:\n    raise RuntimeError('quota')"
    kernel.ns["FAIL"] = True
    assert not kernel.run(cell).success
    kernel.ns["FAIL"] = False
    kernel.ok(cell)
    assert kernel.runs() == [f"send{i}" for i in range(5)]
    assert kernel.ns["results"] == [0, 1, 4, 9, 16]


def test_end_completes_the_run(kernel: Kernel) -> None:
    """%durable end writes run_end; the next %durable run starts a new run."""
    kernel.ok(LOAD)
    run_id = _session(kernel).cell_run.run_id
    kernel.ok("%durable end")
    assert dnb.get_run(run_id, store=kernel.store_url).status == "completed"
    kernel.ok(f"%durable run analysis --store {kernel.store_url}")
    assert _session(kernel).cell_run.run_id != run_id


def test_views_from_magics(kernel: Kernel) -> None:
    """%durable history, runs and status return the views."""
    kernel.ok(LOAD)
    shown = kernel.ok("%durable history")
    assert list(shown.frame["step"]) == ["after:load"]
    assert 'class="durable-nb-status"' in shown._repr_html_()  # statuses as coloured badges in notebooks
    assert len(kernel.ok("%durable runs").frame) == 1
    assert len(kernel.ok("%durable forks").frame) == 1
    status = kernel.ok("%durable status")
    assert status["node_counts"]["ok"] == 1
    assert threading.main_thread().is_alive()


def test_fork_and_switch_magics(kernel: Kernel, capsys: pytest.CaptureFixture[str]) -> None:
    """%durable fork --at NODE --set name=literal branches the run; %durable switch goes back."""
    kernel.ok("rate = 0.1")
    kernel.ok("%%durable setup\nrate = 0.1\nbase = 100")
    kernel.ok("%%durable price\nprice = base * (1 + rate)")
    original = _session(kernel).cell_run.run_id
    kernel.ok("%durable fork --at price --set rate=0.5")
    forked = _session(kernel).cell_run.run_id
    assert forked != original
    assert "forked run" in capsys.readouterr().out
    assert kernel.ns["rate"] == 0.5
    kernel.ok("%%durable price\nprice = base * (1 + rate)")
    assert kernel.ns["price"] == 150.0
    assert dnb.get_run(forked, store=kernel.store_url).state["price"] == 150.0
    assert dnb.get_run(original, store=kernel.store_url).state["price"] == pytest.approx(110.0)
    kernel.ok(f"%durable switch {original}")
    assert _session(kernel).cell_run.run_id == original
    kernel.ok("%%durable price\nprice = base * (1 + rate)")  # restored from the original run
    assert kernel.ns["price"] == pytest.approx(110.0)


def test_a_trailing_semicolon_hides_the_value(kernel: Kernel, capsys: pytest.CaptureFixture[str]) -> None:
    """A %%durable cell ending in ';' shows no Out[n] and leaves _ alone, executed and restored, as
    any cell does; a cell that is not quiet keeps its Out[n]."""
    cells = ["%%durable quiet\nhidden = 5\nhidden * 2;  # a comment after the semicolon", "%%durable shown\nhidden * 3"]
    for cell in cells:
        kernel.ok(cell)
    assert list(kernel.ns["Out"].values()) == [15] and kernel.ns["_"] == 15
    assert "Out[" in capsys.readouterr().out
    other = fresh(kernel)
    other.ok(cells[0])
    assert "Out[" not in capsys.readouterr().out and other.ns["Out"] == {} and other.ns["_"] == ""
    other.ok(cells[1])
    assert list(other.ns["Out"].values()) == [15] and "15" in capsys.readouterr().out
