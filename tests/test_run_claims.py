"""Claims on notebook runs: of processes racing to start a kernel for one run exactly one wins; the
kernel takes the run from its starter's claim and from no other live owner's; two processes never
hold one output notebook. Real SQLite and PostgreSQL stores, real processes as live owners."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import durable_nb as dnb
from durable_nb._ids import host_name
from durable_nb._loop import run_sync
from durable_nb.engine.cells.cell_run import CellRun, new_notebook_run
from durable_nb.engine.runs.claims import claim, unclaim
from durable_nb.engine.runs.ownership import this_owner
from durable_nb.errors import InvalidNotebookRun, OutputInUse, RunOwnedElsewhere
from durable_nb.headless.notebook_run import NotebookRun
from durable_nb.headless.run_claim import claim_run, hold_output
from durable_nb.model import RunStatus


@pytest.fixture
def live_owner() -> Iterator[str]:
    """The owner token of another live process of this machine."""
    process = subprocess.Popen(["sleep", "120"])
    yield f"{host_name()}:{process.pid}:0.live"
    process.kill()
    process.wait()


def _pending(store: dnb.Store, owner: str | None = None) -> str:
    record, _ = run_sync(store.create_run(new_notebook_run("report", "key-1", owned=False, claimed_by=owner)))
    return record.run_id


def test_of_two_claims_on_one_run_as_read_only_the_first_wins(store: dnb.Store, live_owner: str) -> None:
    run_id = _pending(store)
    seen = run_sync(store.get_run(run_id))
    first = run_sync(claim(store, seen, live_owner))
    second = run_sync(claim(store, seen, "elsewhere:1:0.late"))
    assert first is not None and first.owner == live_owner and first.status is RunStatus.PENDING
    assert second is None
    assert run_sync(store.get_run(run_id)).owner == live_owner


def test_a_claim_of_a_live_process_is_never_claimed_again_but_a_dead_ones_is(store: dnb.Store, live_owner: str) -> None:
    held = _pending(store, live_owner)
    assert run_sync(claim(store, run_sync(store.get_run(held)), "elsewhere:1:0.late")) is None
    dead = f"{host_name()}:999999999:0.gone"
    record, _ = run_sync(store.create_run(new_notebook_run("other", "key-2", owned=False, claimed_by=dead)))
    taken = run_sync(claim(store, record, live_owner))
    assert taken is not None and taken.owner == live_owner


def test_a_kernel_takes_the_run_from_the_claim_it_was_handed_and_from_no_other(
    store: dnb.Store, live_owner: str
) -> None:
    run_id = _pending(store, live_owner)
    with pytest.raises(RunOwnedElsewhere, match="another live kernel or process"):
        run_sync(CellRun.attach(store, None, "report", key="key-1"))
    attached = run_sync(CellRun.attach(store, None, "report", key="key-1", claim=live_owner))
    assert attached.run_id == run_id
    assert attached.run.status is RunStatus.RUNNING and attached.run.owner == attached.owner


def test_a_claim_no_kernel_took_is_let_go_by_its_holder_only(store: dnb.Store, live_owner: str) -> None:
    run_id = _pending(store, live_owner)
    assert not run_sync(unclaim(store, run_id, "elsewhere:1:0.late"))
    assert run_sync(unclaim(store, run_id, live_owner))
    after = run_sync(store.get_run(run_id))
    assert after.status is RunStatus.PENDING and after.owner is None


@pytest.mark.backends("sqlite")
def test_a_second_process_for_one_output_notebook_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "out.ipynb"
    with hold_output(target), pytest.raises(OutputInUse, match="Another process is writing"):
        with hold_output(target):
            pass
    with hold_output(target):  # let go once the first is done
        pass


def _prepared(tmp_path: Path, store_url: str) -> NotebookRun:
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("x = 1")]
    path = tmp_path / "report.ipynb"
    nbformat.write(notebook, str(path))
    return NotebookRun.prepare(path, store=store_url)


def test_the_command_claims_its_run_and_records_where_its_notebook_is(
    tmp_path: Path, store_url: str, live_owner: str
) -> None:
    prepared = _prepared(tmp_path, store_url)
    meta = {"notebook": {"path": str(prepared.source), "parameters": {}, "run": None}}
    assert claim_run(prepared, None, meta) == this_owner()
    (run,) = run_sync(dnb.connect(store_url).list_runs("report"))
    assert run.meta == meta and run.owner == this_owner() and run.status is RunStatus.PENDING


def test_a_command_started_for_a_claim_that_is_gone_starts_no_kernel(
    tmp_path: Path, store_url: str, live_owner: str
) -> None:
    prepared = _prepared(tmp_path, store_url)
    store = dnb.connect(store_url)
    record, _ = run_sync(store.create_run(new_notebook_run("report", prepared.run_key, owned=False)))
    assert run_sync(claim(store, record, live_owner)) is not None
    dnb.cancel(record.run_id, store=store_url)  # the server's claim is gone with the cancel
    with pytest.raises(RunOwnedElsewhere, match="no longer claimed by the server that started this process"):
        claim_run(prepared, live_owner, {})
    assert run_sync(store.get_run(record.run_id)).status is RunStatus.CANCELLED


@pytest.mark.backends("sqlite")
def test_an_output_whose_lock_cannot_be_made_is_refused_before_any_kernel(tmp_path: Path) -> None:
    target = tmp_path / "out.ipynb"
    (tmp_path / ".out.ipynb.lock").mkdir()  # in the way: not a file that can be opened and locked
    with pytest.raises(InvalidNotebookRun, match="Cannot write beside the output notebook"):
        with hold_output(target):
            pass
