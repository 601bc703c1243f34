"""A notebook fork keeps its overrides wherever it is continued (real IPython shells and real kernels).

``%durable fork --at fit --set alpha=1.0`` makes ``alpha = 1.0`` part of the state at the fork
point. A cell committed before that point still restores what it defined, except the names a fork
made after it set: there the fork's value wins, in the kernel that made the fork, in a new one
attached with ``--id``, and headless. A cell after the fork point keeps its own result, as it would
live. Each test prints and checks what ``fit`` computed, as the issue's reproduction did.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from kernelkit import Kernel
from shellkit import Shell

import durable_nb as dnb

PARAM = "%%durable param\nalpha = 0.1"
FIT = "%%durable fit\ncoef = alpha * 10\nprint('RESULT alpha', alpha, 'coef', coef)"
WANTED = "RESULT alpha 1.0 coef 10.0"


@pytest.fixture
def shells(store_url: str) -> Iterator[Callable[..., Shell]]:
    made: list[Shell] = []

    def new_shell(run_id: str | None = None) -> Shell:
        made.append(Shell(store_url, "cf", run_id))
        return made[-1]

    yield new_shell
    for shell in made:
        shell.close()


def kernel_store(shell: Shell) -> Any:
    return shell.session.store


def _forked(shells: Callable[..., Shell], *cells: str, fork: str) -> tuple[Shell, str]:
    """Run ``cells`` in a first shell, fork there with ``fork``, and leave: return it and the fork's id."""
    first = shells()
    first.run_all(*cells)
    first.ok(fork)
    return first, first.leave()


def test_same_kernel_run_all_keeps_the_override(
    shells: Callable[..., Shell], capsys: pytest.CaptureFixture[str]
) -> None:
    """The kernel that made the fork: Run All restores 'param' from before the fork point, and the
    override wins over it, so 'fit' computes with 1.0 (it computed with 0.1 before the fix)."""
    kernel = shells()
    kernel.run_all(PARAM, FIT)
    original = kernel.run_id
    kernel.ok("%durable fork --at fit --set alpha=1.0")
    said = capsys.readouterr().out
    kernel.run_all(PARAM, FIT)
    shown = capsys.readouterr().out
    assert WANTED in shown and "alpha as the fork set" in shown
    assert "with alpha set" in said
    fork = kernel.run_id
    assert dnb.get_run(fork, store=kernel_store(kernel)).state["coef"] == 10.0
    assert dnb.get_run(original, store=kernel_store(kernel)).state["coef"] == 1.0  # the original is untouched
    kernel.run_all(PARAM, FIT)  # again: both restored, still the fork's values
    assert kernel.ns["alpha"] == 1.0 and kernel.ns["coef"] == 10.0


def test_a_new_shell_attached_with_id_keeps_an_override_set_cells_earlier(
    shells: Callable[..., Shell], capsys: pytest.CaptureFixture[str]
) -> None:
    """A fresh shell attached to the fork with --id, Run All: the value overridden was defined
    three cells before the fork point; every restore before it keeps the fork's value."""
    cells = [PARAM, "%%durable prep\nbeta = 2", "%%durable other\ngamma = [1, 2]", FIT]
    _, fork = _forked(shells, *cells, fork="%durable fork --at fit --set alpha=1.0")
    capsys.readouterr()
    second = shells(fork)
    second.run_all(*cells)
    assert WANTED in capsys.readouterr().out
    assert (second.ns["beta"], second.ns["gamma"]) == (2, [1, 2])
    assert dnb.get_run(fork, store=kernel_store(second)).state["coef"] == 10.0


def test_a_cell_after_the_fork_point_that_reassigns_the_name_wins(
    shells: Callable[..., Shell], capsys: pytest.CaptureFixture[str]
) -> None:
    """After the fork point a cell's own result wins, as it would live: 'retune' multiplies the
    overridden alpha, and that product is what later cells and a new shell see."""
    retune = "%%durable retune\nalpha = alpha * 5"
    report = "%%durable report\nprint('REPORT alpha', alpha, 'coef', coef)"
    _, fork = _forked(shells, PARAM, FIT, retune, report, fork="%durable fork --at retune --set alpha=1.0")
    capsys.readouterr()
    second = shells(fork)
    second.run_all(PARAM, FIT, retune, report)
    shown = capsys.readouterr().out
    # 'fit' ran before the fork point: restored with the original coef; 'retune' ran live from 1.0.
    assert "REPORT alpha 5.0 coef 1.0" in shown
    assert second.leave() == fork
    third = shells(fork)
    third.run_all(PARAM, FIT, retune, report)  # everything restored now
    assert "REPORT alpha 5.0 coef 1.0" in capsys.readouterr().out
    assert third.ns["alpha"] == 5.0


def test_a_fork_of_a_fork_keeps_the_overrides_of_both(
    shells: Callable[..., Shell], capsys: pytest.CaptureFixture[str]
) -> None:
    """Overrides at two levels: a fork (alpha) of the run, then a fork of that fork (beta); a new
    shell attached to the second restores both; forking again above both carries both along."""
    a, b = "%%durable a\nalpha = 0.1", "%%durable b\nbeta = 0.2"
    c = "%%durable c\ntotal = alpha + beta\nprint('TOTAL', total)"
    first = shells()
    first.run_all(a, b, c)
    first.ok("%durable fork --at c --set alpha=1.0")
    first.run_all(a, b, c)
    first.ok("%durable fork --at c --set beta=2.0")
    second_fork = first.leave()
    capsys.readouterr()
    second = shells(second_fork)
    second.run_all(a, b, c)
    assert "TOTAL 3.0" in capsys.readouterr().out
    # Branching above both fork points carries both overrides; the cell run again ('b') wins for its own name.
    second.ok("%durable fork --at b")
    second.run_all(a, b, c)
    assert "TOTAL 1.2" in capsys.readouterr().out
    third = second.leave()
    tree = dnb.forks(third, store=kernel_store(second))
    carried = tree.set_index("run_id").loc[third, "overrides"]
    assert sorted(carried) == ["alpha", "beta"]


def test_an_override_of_one_of_several_variables_sharing_objects_says_so(
    shells: Callable[..., Shell], capsys: pytest.CaptureFixture[str]
) -> None:
    """'cfg' and 'alias' are one object, stored together. Overriding cfg rebinds cfg alone (as
    ``cfg = {...}`` would): alias keeps the old dict, and both the fork and every restore say so."""
    setup = "%%durable setup\ncfg = {'alpha': 0.1}\nalias = cfg"
    fit = "%%durable fit\ncoef = cfg['alpha'] * 10\nprint('RESULT', cfg['alpha'], alias['alpha'], coef)"
    first = shells()
    first.run_all(setup, fit)
    first.ok("%durable fork --at fit --set cfg={'alpha':1.0}")
    said = capsys.readouterr().out
    fork = first.leave()
    second = shells(fork)
    second.run_all(setup, fit)
    shown = capsys.readouterr().out
    assert "RESULT 1.0 0.1 10.0" in shown
    assert "alias shared objects with cfg at the fork point" in said
    assert "alias shared objects with cfg in cell 'setup'" in shown
    assert second.ns["cfg"] is not second.ns["alias"]
    # Overriding every variable of the group (values typed in quotes): nothing to warn about.
    second.ok("%durable fork --at fit --set \"cfg={'alpha': 2.0}\" --set 'alias={\"alpha\": 2.0}'")
    assert "shared objects" not in capsys.readouterr().out
    second.run_all(setup, fit)
    shown = capsys.readouterr().out
    assert "RESULT 2.0 2.0 20.0" in shown and "shared objects" not in shown


def test_a_replayed_cell_before_the_fork_point_gets_the_override_back(
    shells: Callable[..., Shell], capsys: pytest.CaptureFixture[str]
) -> None:
    """A --replay cell runs again on restore: it assigns 0.1 live, and the fork's value is put back after it."""
    param = "%%durable param --replay\nalpha = 0.1"
    _, fork = _forked(shells, param, FIT, fork="%durable fork --at fit --set alpha=1.0")
    capsys.readouterr()
    second = shells(fork)
    second.run_all(param, FIT)
    assert WANTED in capsys.readouterr().out
    assert dnb.get_run(fork, store=kernel_store(second)).state["alpha"] == 1.0


def test_a_fork_at_the_first_durable_cell_keeps_its_override(
    shells: Callable[..., Shell], capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing durable before the fork point: alpha comes from a plain cell, which a new kernel runs
    again. The fork's value is put in place when the kernel reaches the fork, with a note; a plain
    change made after that is the person's and is kept, with a warning."""
    _, fork = _forked(shells, "alpha = 0.1", FIT, fork="%durable fork --at fit --set alpha=1.0")
    capsys.readouterr()
    second = shells(fork)
    second.run_all("alpha = 0.1", FIT)
    shown = capsys.readouterr().out
    assert WANTED in shown and "set alpha = 1.0 in this kernel" in shown
    second.ok("alpha = 3.0")
    second.ok("%%durable later\nlater = alpha")
    shown = capsys.readouterr().out
    assert second.ns["later"] == 3.0
    assert "alpha in this kernel differs from what run" in shown
    second.ok("%%durable again\nagain = alpha")
    assert "differs" not in capsys.readouterr().out  # said once
    assert dnb.get_run(fork, store=kernel_store(second)).state["alpha"] == 3.0


def test_a_cell_whose_checkpoint_was_pruned_runs_again_and_the_override_stays(
    shells: Callable[..., Shell], capsys: pytest.CaptureFixture[str]
) -> None:
    """The original run completed and its history was pruned: 'param' has nothing left to restore
    and runs again in the fork; it stands for a restore, so the fork's value is put back, and said."""
    other = "%%durable other\nbeta = 2"
    first = shells()
    first.run_all(PARAM, other, FIT)
    original = first.run_id
    first.ok("%durable fork --at fit --set alpha=1.0")
    fork = first.leave()
    first.ok(f"%durable switch {original}")
    first.ok("%durable end")
    pruned = dnb.prune(datetime.now() + timedelta(minutes=1), store=kernel_store(first))
    assert pruned.checkpoints >= 1
    capsys.readouterr()
    second = shells(fork)
    second.run_all(PARAM, other, FIT)
    shown = capsys.readouterr().out
    assert WANTED in shown
    assert "its checkpoint is gone (pruned), so it ran again; alpha keeps the value the fork set" in shown


def test_the_inspector_fork_then_switch_keeps_the_override(
    shells: Callable[..., Shell], capsys: pytest.CaptureFixture[str]
) -> None:
    """A fork made in the inspector (any checkpoint, typed overrides), then 'Switch kernel' and Run All."""
    from durable_nb.widgets.inspector import Inspector

    kernel = shells()
    kernel.run_all(PARAM, FIT)
    session = kernel.session
    inspector = Inspector(kernel.run_id, store=session.store, link=session)
    before_fit = dnb.history(kernel.run_id, store=session.store)
    inspector.checkpoints.value = before_fit.set_index("step").loc["after:param", "checkpoint_id"]
    inspector.overrides.value = "alpha = 1.0"
    inspector.fork()
    inspector.switch()
    capsys.readouterr()
    kernel.run_all(PARAM, FIT)
    assert WANTED in capsys.readouterr().out
    inspector.close()


@pytest.mark.slow
@pytest.mark.backends("sqlite")  # a real kernel: its PostgreSQL case is in test_kernels.py
def test_a_new_kernel_attached_with_id_then_run_all(kernels: Callable[[], Kernel]) -> None:
    """The issue's reproduction in real kernels: the kernel that forked is gone (killed), a fresh
    kernel attaches to the fork with --id and runs all: 'fit' computes with the override."""
    first = kernels()
    assert first.run("%load_ext durable_nb\n%durable run cf").status == "ok"
    assert [r.status for r in first.run_all([PARAM, FIT])] == ["ok", "ok"]
    forked = first.run("%durable fork --at fit --set alpha=1.0")
    assert forked.status == "ok", forked.text
    run_id = re.search(r"into ([0-9a-f-]{36})", forked.text).group(1)  # the note names the fork
    first.kill()
    second = kernels()
    assert second.run(f"%load_ext durable_nb\n%durable run cf --id {run_id}").status == "ok"
    results = second.run_all([PARAM, FIT])
    assert [r.status for r in results] == ["ok", "ok"], [r.text for r in results]
    assert WANTED in results[1].text
    assert "alpha as the fork set" in results[0].text
