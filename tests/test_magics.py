"""Every ``%durable`` subcommand and every ``%%durable`` option, run in a real IPython shell, and the
ones that show views or widgets in a real kernel too.

The lists are read from the magics themselves: a subcommand or an option added without an
exercise here fails this file, so a magic that cannot run never ships again.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kernelkit import CellResult, Kernel
from shellkit import Shell

import durable_nb as dnb
from durable_nb._loop import run_sync
from durable_nb.notebook.handover import ATTACH_VARIABLE, Handover
from durable_nb.notebook.magic_arguments import parser_of
from durable_nb.notebook.magics import SUBCOMMANDS, DurableMagics
from durable_nb.store import disconnect

Out = pytest.CaptureFixture[str]
Exercise = Callable[[Shell, Out, Path], None]

EXERCISES: dict[str, Exercise] = {}
# The options each subcommand's exercise uses, checked against the subcommand's own parser.
EXERCISED_OPTIONS: dict[str, set[str]] = {}
PARSERS = {
    "run": "_run_args",
    "fork": "_fork_args",
    "replay": "_replay_args",
    "approve": "_decision_args",
    "reject": "_decision_args",
}


def exercise(subcommand: str, *options: str) -> Callable[[Exercise], Exercise]:
    def register(function: Exercise) -> Exercise:
        EXERCISES[subcommand] = function
        EXERCISED_OPTIONS[subcommand] = set(options)
        return function

    return register


def _options(function: Any) -> set[str]:
    """The ``--options`` a magic's parser knows, read from its usage line."""
    return set(re.findall(r"--[\w-]+", parser_of(function).format_usage()))


def said(out: Out) -> str:
    captured = out.readouterr()
    return captured.out + captured.err


LOAD = "%%durable load\nrows = [1, 2, 3]\nprint('loaded', len(rows))\nlen(rows)"
GATE = "%%durable review\nimport durable_nb as dnb\nd = dnb.gate('publish?', {'rows': 3})\npublished = d.approved"


@pytest.fixture
def shell(store_url: str) -> Iterator[Shell]:
    made = Shell(store_url, "magics")
    yield made
    made.close()


# -- the subcommands ----------------------------------------------------------------------------


@exercise("run", "--new", "--id", "--key", "--store", "--from-env", "--all")
def _run(shell: Shell, out: Out, folder: Path) -> None:
    first = shell.run_id
    shell.ok("%durable run magics")  # the latest unfinished run of that name: the same one
    assert shell.run_id == first and "'magics' — running" in said(out)
    shell.ok("%durable run magics --new")
    second = shell.run_id
    assert second != first
    shell.ok(f"%durable run magics --id {first}")
    assert shell.run_id == first
    shell.ok("%durable run keyed --key k-1")
    keyed = shell.run_id
    shell.ok("%durable run magics --new")
    shell.ok("%durable run keyed --key k-1")
    assert shell.run_id == keyed  # a repeated key attaches to the same run
    shell.ok('%durable run "two words"')  # typed in quotes: the name without them
    assert dnb.get_run(shell.run_id, store=shell.store_url).name == "two words"
    other = f"sqlite:///{folder}/other store.db"
    shell.ok(f'%durable run elsewhere --store "{other}"')
    assert (folder / "other store.db").exists() and len(dnb.runs(store=other)) == 1
    shell.ok("%durable run magics --all")  # every later cell durable, without a %%durable line
    shell.ok("every = 1")
    assert shell.session.require().completed[-1].startswith("cell1_")
    shell.ok("%durable off")
    # As run-notebook starts a kernel: the run handed over as data in the environment, then removed.
    handed = f"sqlite:///{folder}/handed.db"
    os.environ.update(Handover("handed; over", key="k-2", store=handed).environment({}))
    try:
        shell.ok("%durable run --from-env")
        assert ATTACH_VARIABLE not in os.environ
    finally:
        os.environ.pop(ATTACH_VARIABLE, None)
    assert dnb.get_run(shell.run_id, store=handed).name == "handed; over"


@exercise("status")
def _status(shell: Shell, out: Out, folder: Path) -> None:
    shell.ok(LOAD)
    said(out)
    status = shell.ok("%durable status")
    assert status["run_id"] == shell.run_id and status["node_counts"]["ok"] == 1
    assert "1 cell restorable (load)" in said(out)


@exercise("history")
def _history(shell: Shell, out: Out, folder: Path) -> None:
    shell.ok(LOAD)
    shown = shell.ok("%durable history")
    assert list(shown.frame["step"]) == ["after:load"] and "durable-nb-status" in shown._repr_html_()
    assert list(shell.ok(f"%durable history {shell.run_id}").frame["step"]) == ["after:load"]


@exercise("runs")
def _runs(shell: Shell, out: Out, folder: Path) -> None:
    shell.ok("%durable run second --new")
    assert len(shell.ok("%durable runs").frame) == 2
    assert list(shell.ok("%durable runs second").frame["name"]) == ["second"]


@exercise("forks")
def _forks(shell: Shell, out: Out, folder: Path) -> None:
    shell.ok(LOAD)
    original = shell.run_id
    shell.ok("%durable fork")
    tree = shell.ok("%durable forks").frame
    assert set(tree["run_id"]) == {original, shell.run_id}
    assert len(shell.ok(f"%durable forks {original}").frame) == 2


@exercise("end")
def _end(shell: Shell, out: Out, folder: Path) -> None:
    shell.ok(LOAD)
    run_id = shell.run_id
    shell.ok("%durable end")
    assert dnb.get_run(run_id, store=shell.store_url).status == "completed"
    assert "completed" in said(out)
    shell.ok(f"%durable run magics --id {run_id}")
    shell.ok("%durable end")  # Run All of a finished notebook reaches it again
    assert "already completed" in said(out)


@exercise("fork", "--at", "--set")
def _fork(shell: Shell, out: Out, folder: Path) -> None:
    shell.run_all("%%durable base\nrate = 0.1", "%%durable price\nprice = 100 * (1 + rate)")
    original = shell.run_id
    shell.ok("%durable fork --at price --set rate=0.5")
    assert shell.run_id != original and shell.ns["rate"] == 0.5 and "forked run" in said(out)
    shell.ok("%%durable price\nprice = 100 * (1 + rate)")
    assert shell.ns["price"] == 150.0
    forked = shell.run_id
    shell.ok("%durable fork --set rate=0.25")  # at the latest state
    assert dnb.get_run(shell.run_id, store=shell.store_url).parent_run_id == forked
    assert shell.ns["rate"] == 0.25


@exercise("replay", "--at", "--set", "--sweep", "--wait")
def _replay(shell: Shell, out: Out, folder: Path) -> None:
    shell.run_all("%%durable base\nrate = 0.5\nfee = 1", "%%durable price\nprice = 100 * (1 + rate) + fee")
    original = shell.run_id
    said(out)
    shell.ok("%durable replay --at price --set fee=2 --sweep rate=1.0 --wait")
    assert "replaying run" in said(out) and shell.run_id == original and shell.ns["price"] == 151.0
    forks = [r for r in dnb.runs("magics", store=shell.store_url)["run_id"] if r != original]
    assert len(forks) == 1
    fork = dnb.get_run(forks[0], store=shell.store_url)
    assert fork.status == "completed" and fork.state["price"] == 202.0
    assert "has no values" in _refused(shell, "%durable replay --at price --sweep rate=", out)
    assert "rate is float" in _refused(shell, "%durable replay --at price --set rate='x'", out)
    assert "No cell 'nope'" in _refused(shell, "%durable replay --at nope", out)
    assert len(dnb.runs("magics", store=shell.store_url)) == 2  # refused: nothing created


@exercise("switch")
def _switch(shell: Shell, out: Out, folder: Path) -> None:
    shell.ok(LOAD)
    original = shell.run_id
    shell.ok("%durable fork")
    assert shell.run_id != original
    shell.ok(f"%durable switch {original}")
    assert shell.run_id == original
    assert "give the run id" in _refused(shell, "%durable switch", out)


@exercise("inspect")
def _inspect(shell: Shell, out: Out, folder: Path) -> None:
    shell.ok(LOAD)
    said(out)
    shell.ok("%durable inspect")
    assert f"<Inspector run {shell.run_id!r}>" in said(out)
    original = shell.run_id
    shell.ok("%durable run other --new")
    shell.ok(f"%durable inspect {original}")
    assert f"<Inspector run {original!r}>" in said(out)


@exercise("approve", "--node", "--comment", "--by")
def _approve(shell: Shell, out: Out, folder: Path) -> None:
    _decide(shell, out, "approve", True)


@exercise("reject", "--node", "--comment", "--by")
def _reject(shell: Shell, out: Out, folder: Path) -> None:
    _decide(shell, out, "reject", False)


def _decide(shell: Shell, out: Out, verb: str, approved: bool) -> None:
    paused = shell.run(GATE)
    assert type(paused.error_in_exec).__name__ == "GatePending"
    shell.ok(f'%durable {verb} --node review --comment "numbers checked" --by dana')
    assert shell.ns["published"] is approved
    assert f"{'approved' if approved else 'rejected'} the gate of cell 'review'" in said(out)
    checkpoints = run_sync(shell.session.store.list_checkpoints(shell.run_id))
    decided = next(c.decision for c in checkpoints if c.step == "approved:review")
    assert (decided["approved"], decided["comment"], decided["by"]) == (approved, "numbers checked", "dana")
    shell.ok(f"%durable {verb}")  # Run All reaches it again: nothing left to decide
    assert "already decided" in said(out)


@exercise("off")
def _off(shell: Shell, out: Out, folder: Path) -> None:
    shell.ok("%durable run magics --all")
    shell.ok("kept = 1")
    shell.ok("%durable off")
    shell.ok("scratch = 2")
    assert len(shell.session.require().completed) == 1 and shell.session.cell_run is not None
    assert "it is not on in this kernel" in _refused(shell, "%durable off", out)


@exercise("notes")
def _notes(shell: Shell, out: Out, folder: Path) -> None:
    shell.ok(LOAD)
    said(out)
    shell.ok("%durable notes off")
    shell.ok(LOAD)
    assert "restored 'load'" not in said(out)
    shell.ok("%durable notes on")
    shell.ok(LOAD)
    assert "restored 'load'" in said(out)
    assert "takes on or off" in _refused(shell, "%durable notes maybe", out)


def _refused(shell: Shell, line: str, out: Out) -> str:
    result = shell.run(line)
    assert not result.success and type(result.error_in_exec).__name__ == "UsageError", line
    return said(out)


def test_every_subcommand_has_an_exercise() -> None:
    """A subcommand added to the magic without an exercise below fails here."""
    assert set(EXERCISES) == set(SUBCOMMANDS)
    for subcommand in SUBCOMMANDS:
        assert callable(getattr(DurableMagics, f"_{subcommand}")), subcommand


def test_every_subcommand_option_is_exercised() -> None:
    """Each option a subcommand's parser takes is used by that subcommand's exercise."""
    parsers = {name for name in vars(DurableMagics) if name.endswith("_args")}
    assert parsers == set(PARSERS.values())  # a new parser belongs to a subcommand listed above
    for subcommand in SUBCOMMANDS:
        parser = PARSERS.get(subcommand)
        known = _options(getattr(DurableMagics, parser)) if parser else set()
        assert EXERCISED_OPTIONS[subcommand] == known, subcommand


@pytest.mark.parametrize("subcommand", SUBCOMMANDS)
def test_subcommand_in_a_shell(subcommand: str, shell: Shell, capsys: Out, tmp_path: Path) -> None:
    """The subcommand does its job in a real IPython shell, with each of its options."""
    EXERCISES[subcommand](shell, capsys, tmp_path)


def test_an_unknown_subcommand_lists_them(shell: Shell, capsys: Out) -> None:
    """A misspelt subcommand is a UsageError naming every subcommand."""
    message = _refused(shell, "%durable statsu", capsys)
    assert all(subcommand in message for subcommand in SUBCOMMANDS)


@pytest.mark.backends("sqlite")
def test_a_store_that_fails_does_not_keep_the_kernel_from_attaching_elsewhere(
    shell: Shell, capsys: Out, tmp_path: Path
) -> None:
    """Leaving a run whose store no longer answers (here closed) for a run in another store attaches there,
    and says the old run could not be handed back."""
    left = shell.run_id
    disconnect(shell.store_url)  # the kernel's store object is closed: every call to it fails
    said(capsys)
    shell.ok(f"%durable run elsewhere --store sqlite:///{tmp_path}/elsewhere.db")
    shown = said(capsys)
    assert f"Could not hand back run {left}" in shown, shown
    assert shell.session.require().run.name == "elsewhere"
    shell.ok("%%durable first\nx = 1")
    assert shell.session.require().completed == ["first"]


# -- the cell magic and its options ----------------------------------------------------------------

CELL_EXERCISES: dict[str, Exercise] = {}


def cell_exercise(option: str) -> Callable[[Exercise], Exercise]:
    def register(function: Exercise) -> Exercise:
        CELL_EXERCISES[option] = function
        return function

    return register


@cell_exercise("node")
def _node(shell: Shell, out: Out, folder: Path) -> None:
    assert shell.ok(LOAD) == 3
    assert "loaded 3" in said(out)
    shell.ns.pop("rows")
    shell.ok(LOAD)  # restored, not run: the value and the output come back
    assert shell.ns["rows"] == [1, 2, 3]
    assert "restored 'load'" in said(out)


@cell_exercise("--retries")
def _retries(shell: Shell, out: Out, folder: Path) -> None:
    tries = folder / "tries.txt"
    cell = (
        f"%%durable flaky --retries 1\nopen({str(tries)!r}, 'a').write('x')\n"
        f"if open({str(tries)!r}).read() == 'x':\n    raise ConnectionError('first try')\nok = True"
    )
    shell.ok(cell)
    assert tries.read_text() == "xx" and shell.ns["ok"] is True
    assert "retry 1 of 1" in said(out)


@cell_exercise("--timeout")
def _timeout(shell: Shell, out: Out, folder: Path) -> None:
    result = shell.run("%%durable slow --timeout 0.3\nimport time\ntime.sleep(60)")
    assert isinstance(result.error_in_exec, dnb.NodeTimeout)
    assert dnb.get_run(shell.run_id, store=shell.store_url).status == "failed"


@cell_exercise("--rerun")
def _rerun(shell: Shell, out: Out, folder: Path) -> None:
    shell.ok(LOAD)
    original = shell.run_id
    shell.ok(LOAD.replace("%%durable load", "%%durable load --rerun"))
    assert shell.run_id != original and "re-run with --rerun" in said(out)


@cell_exercise("--exclude")
def _exclude(shell: Shell, out: Out, folder: Path) -> None:
    shell.ok("%%durable mix --exclude scratch,other\nscratch = 1\nother = 2\nkept = 3")
    state = dnb.get_run(shell.run_id, store=shell.store_url).state
    assert "kept" in state and "scratch" not in state and "other" not in state


@cell_exercise("--replay")
def _replay(shell: Shell, out: Out, folder: Path) -> None:
    ran = folder / "ran.txt"
    cell = f"%%durable setup --replay\nopen({str(ran)!r}, 'a').write('x')\nseed = 7"
    shell.ok(cell)
    shell.ok(cell)  # restored by running it again
    assert ran.read_text() == "xx" and "replaying 'setup'" in said(out)


def test_every_cell_option_has_an_exercise() -> None:
    """An option added to %%durable without an exercise below fails here."""
    assert set(CELL_EXERCISES) == {"node"} | _options(DurableMagics.durable)


@pytest.mark.parametrize("option", sorted(CELL_EXERCISES))
def test_cell_magic_option_in_a_shell(option: str, shell: Shell, capsys: Out, tmp_path: Path) -> None:
    """%%durable with the option does what it says, in a real IPython shell."""
    CELL_EXERCISES[option](shell, capsys, tmp_path)


# -- views and widgets in a real kernel --------------------------------------------------------------

WIDGET = "application/vnd.jupyter.widget-view+json"


def _data(result: CellResult, kind: str) -> list[dict[str, Any]]:
    return [o["data"] for o in result.outputs if o["type"] == kind]


def _notes(result: CellResult) -> str:
    return "".join(d.get("text/plain", "") for d in _data(result, "display_data"))


def _ok(kernel: Kernel, code: str) -> CellResult:
    result = kernel.run(code)
    assert result.status == "ok", (code, result.text)
    return result


KERNEL_CHECKS: dict[str, Callable[[Kernel], None]] = {}


def in_kernel(subcommand: str) -> Callable[[Callable[[Kernel], None]], Callable[[Kernel], None]]:
    def register(function: Callable[[Kernel], None]) -> Callable[[Kernel], None]:
        KERNEL_CHECKS[subcommand] = function
        return function

    return register


@in_kernel("run")
def _k_run(kernel: Kernel) -> None:
    assert "'views' — running" in _notes(_ok(kernel, "%durable run views"))


@in_kernel("status")
def _k_status(kernel: Kernel) -> None:
    result = _ok(kernel, "%durable status")
    assert "'node_counts'" in _data(result, "execute_result")[0]["text/plain"]


@in_kernel("history")
def _k_history(kernel: Kernel) -> None:
    html = _data(_ok(kernel, "%durable history"), "execute_result")[0]["text/html"]
    assert "after:load" in html and "durable-nb-status" in html


@in_kernel("runs")
def _k_runs(kernel: Kernel) -> None:
    assert "<table" in _data(_ok(kernel, "%durable runs"), "execute_result")[0]["text/html"]


@in_kernel("forks")
def _k_forks(kernel: Kernel) -> None:
    assert "<table" in _data(_ok(kernel, "%durable forks"), "execute_result")[0]["text/html"]


@in_kernel("inspect")
def _k_inspect(kernel: Kernel) -> None:
    shown = _data(_ok(kernel, "%durable inspect"), "display_data")
    assert any(WIDGET in data and data["text/plain"].startswith("<Inspector run") for data in shown)


@in_kernel("replay")
def _k_replay(kernel: Kernel) -> None:
    result = _ok(kernel, "%durable replay --at load --set rows=[4] --wait")
    assert "replaying run" in _notes(result)
    assert any(WIDGET in data for data in _data(result, "display_data"))  # a bar per fork


@in_kernel("approve")
def _k_approve(kernel: Kernel) -> None:
    paused = kernel.run(GATE)
    assert any(WIDGET in data for data in _data(paused, "display_data"))  # the gate panel
    decided = _ok(kernel, "%durable approve --comment ok")
    assert "approved the gate of cell 'review'" in _notes(decided)
    assert "published True" in _ok(kernel, "print('published', published)").text


@in_kernel("reject")
def _k_reject(kernel: Kernel) -> None:
    _ok(kernel, "%durable run views --new")
    kernel.run(GATE)
    assert "rejected the gate of cell 'review'" in _notes(_ok(kernel, "%durable reject"))


@in_kernel("fork")
def _k_fork(kernel: Kernel) -> None:
    _ok(kernel, LOAD)
    assert "forked run" in _notes(_ok(kernel, "%durable fork --at load"))


@in_kernel("switch")
def _k_switch(kernel: Kernel) -> None:
    run_id = _ok(kernel, "print(dnb.runs('views')['run_id'].iloc[-1])").text.strip()
    assert "'views' — " in _notes(_ok(kernel, f"%durable switch {run_id}"))


@in_kernel("notes")
def _k_notes(kernel: Kernel) -> None:
    _ok(kernel, "%durable notes off")
    assert _notes(_ok(kernel, LOAD)) == ""
    _ok(kernel, "%durable notes on")


@in_kernel("off")
def _k_off(kernel: Kernel) -> None:
    assert "every code cell from here on runs durably" in _notes(_ok(kernel, "%durable run views --all"))
    _ok(kernel, "every = 1")
    assert "restored 'cell" in _notes(_ok(kernel, "every = 1"))  # the same cell again: restored
    assert "run as written" in _notes(_ok(kernel, "%durable off"))


@in_kernel("end")
def _k_end(kernel: Kernel) -> None:
    assert "completed" in _notes(_ok(kernel, "%durable end"))


@pytest.mark.slow
@pytest.mark.backends("sqlite")  # a real kernel: its PostgreSQL case is in test_kernels.py
def test_every_subcommand_in_a_real_kernel(kernels: Callable[[], Kernel]) -> None:
    """In a real kernel: views are HTML tables, the inspector and the gate panel are widgets, the
    rest speak in notes; every subcommand runs there, in the order a notebook would use them."""
    assert set(KERNEL_CHECKS) == set(SUBCOMMANDS)
    kernel = kernels()
    _ok(kernel, "%load_ext durable_nb\nimport durable_nb as dnb")
    order = ["run", "status", "history", "runs", "forks", "inspect", "replay", "approve", "reject", "fork", "switch"]
    order += ["notes", "off", "end"]
    assert sorted(order) == sorted(SUBCOMMANDS)
    KERNEL_CHECKS["run"](kernel)
    _ok(kernel, LOAD)
    for subcommand in order[1:]:
        KERNEL_CHECKS[subcommand](kernel)


@pytest.mark.parametrize(
    "line",
    [
        "",
        "demo",
        "demo --all",
        "--all demo",
        "demo --new --all",
        "sales-report",
        "a b",
        "--from-env",
        "x.y_z-1",
        "train --rerun",
        "--replay --rerun train",
        "demo --id r1",
        "'quoted'",
        "--al demo",
        "-h",
    ],
)
def test_lines_read_without_argparse_read_as_argparse_reads_them(line: str) -> None:
    """A line of bare words and flags without values is read without building a parser, to the same
    arguments argparse gives; any other line is left to argparse."""
    from durable_nb.notebook.magic_arguments import _simple, parser_of
    from durable_nb.notebook.magics import DurableMagics

    stubs = [DurableMagics.durable, DurableMagics._run_args, DurableMagics._fork_args]
    stubs += [DurableMagics._replay_args, DurableMagics._decision_args]
    for stub in stubs:
        simple = _simple(stub, line)
        if simple is None:
            continue
        assert simple == parser_of(stub).parse_argstring(line), (stub.__name__, line)
    assert _simple(DurableMagics._run_args, "demo --all") is not None
    assert _simple(DurableMagics.durable, "train --rerun") is not None


def test_the_run_help_names_the_handover_variable() -> None:
    """`%durable run --from-env`'s help names the variable run-notebook hands the run over in."""
    from durable_nb.notebook.handover import ATTACH_VARIABLE
    from durable_nb.notebook.magic_arguments import parser_of
    from durable_nb.notebook.magics import DurableMagics

    assert re.search(re.escape(f"${ATTACH_VARIABLE}") + r"\b", parser_of(DurableMagics._run_args).format_help())
