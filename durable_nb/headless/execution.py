"""Run a prepared notebook in a new kernel, as often as gates ask, and say how it ended.

The kernel starts on Unix sockets with its run handed over in its environment; the output
notebook is written as cells finish; progress is a bar on a terminal, else a line per cell. The
outcome (exit code 0 completed, 1 failed, 3 paused at a gate) names the run, the output, the
error that stopped it and, at a gate, the command that decides it from a shell.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._loop import run_sync
from ..engine.runs.claims import handed_claim
from ..errors import ConfigurationError
from ..model import RunRecord
from .client import durable_client_class
from .inputs import check_output_path
from .kernels import ipc_sockets, kernel_config
from .lease_keeper import LeaseKeeper
from .notebook_run import NotebookRun, fork_last_run
from .progress import Tally, progress_for
from .run_claim import META, claim_run, hold_output, release_claim

__all__ = ["EXIT_COMPLETED", "EXIT_FAILED", "EXIT_PAUSED", "NotebookOutcome", "run_notebook"]

EXIT_COMPLETED, EXIT_FAILED, EXIT_PAUSED = 0, 1, 3


@dataclass
class NotebookOutcome:
    """How a headless run ended: its exit code, the run, the output written and, at a gate, how to decide."""

    exit_code: int
    run_name: str
    run: RunRecord | None = None
    output: Path | None = None
    tally: Tally | None = None
    failure: tuple[str, str] | None = None  # the failed cell's (or dead kernel's) error type and message
    gate: dict[str, str] | None = None  # {"node", "reason", "decide"} when paused

    @property
    def meaning(self) -> str:
        """What the exit code says, and what to do next."""
        if self.exit_code == EXIT_COMPLETED:
            return "completed: every cell ran"
        if self.exit_code == EXIT_PAUSED:
            return "paused at a gate: decide it, then run the same command again to continue"
        return "failed: fix the cause, then run the same command again to resume"

    def as_json(self) -> dict[str, Any]:
        """The outcome as one JSON object (what ``run-notebook --json`` prints)."""
        tally = self.tally
        return {
            "run_id": self.run.run_id if self.run else None,
            "name": self.run_name,
            "status": self.run.status.value if self.run else None,
            "exit_code": self.exit_code,
            "meaning": self.meaning,
            "output": str(self.output.absolute()) if self.output is not None else None,
            "cells": {"total": tally.total, "restored": tally.restored, "executed": tally.executed} if tally else None,
            "error": {"type": self.failure[0], "message": self.failure[1]} if self.failure else None,
            "gate": self.gate,
            "parent_run_id": self.run.parent_run_id if self.run else None,
        }


def run_notebook(
    path: str | Path,
    output: str | Path | None = None,
    *,
    parameters: dict[str, Any] | None = None,
    run: str | None = None,
    store: str | None = None,
    kernel: str = "python3",
    wait: bool = False,
    say: Callable[[str], None] = print,
    cell_timeout: float | None = None,
    progress: Any = None,
    fork: bool = False,
    key: str | None = None,
) -> NotebookOutcome:
    """Run a notebook durably; its outcome's exit code is 0 (completed), 1 (a cell failed) or 3 (paused at a gate).

    ``progress`` is a stream for a progress bar (used when it is a terminal); otherwise each
    finished cell is one line through ``say``. ``fork``: parameters not run before branch the
    notebook's last run at the parameters cell instead of starting from the first cell. A path,
    run name, parameter or store it cannot use raises ``InvalidNotebookRun`` before any kernel starts; so
    do an output another process writes (``OutputInUse``) and a run another live process works on
    (``RunOwnedElsewhere``). ``key`` names the run instead of the path and parameters (a schedule gives
    each due time one).
    """
    target = check_output_path(output) if output is not None else None
    handed = handed_claim()  # a server that started this process claimed the run for it
    with hold_output(target):
        while True:
            prepared = NotebookRun.prepare(path, parameters, run, store, kernel, key)
            if fork:
                forked = fork_last_run(prepared)
                if forked is not None:
                    say(f"forked the last run of {prepared.run_name} at the parameters cell: run {forked}")
                fork = False  # once: after a gate the same run goes on
            recorded = {"path": str(prepared.source), "parameters": prepared.parameters, "run": run}
            meta = {META: recorded if key is None else {**recorded, "key": key}}
            prepared.claim = claim_run(prepared, handed, meta)
            handed = None
            try:
                code, failure, tally = _execute(prepared, target, kernel, say, cell_timeout, progress)
            finally:
                release_claim(prepared, prepared.claim)
            record = _run_of(prepared)
            outcome = NotebookOutcome(code, prepared.run_name, record, target, tally, failure)
            if code != EXIT_PAUSED:
                return outcome
            if record is None:
                raise ConfigurationError(f"The run of {prepared.run_name} paused, but it is not in the store.")
            outcome.gate = gate = _waiting_gate(prepared, record.run_id, store)
            say(f"paused at gate {gate['reason']!r} in cell {gate['node']!r} of run {record.run_id}")
            say(f"decide it with: {gate['decide']}  (or `durable-nb reject`; --comment says why)")
            say(
                "then run this same command again: it continues after the gate"
                + (" (waiting here for the decision…)" if wait else " (or add --wait to wait here for the decision)")
            )
            if not (wait and _await_decision(prepared, record.run_id)):
                return outcome


def _execute(
    prepared: NotebookRun,
    target: Path | None,
    kernel: str,
    say: Callable[[str], None],
    cell_timeout: float | None,
    stream: Any,
) -> tuple[int, tuple[str, str] | None, Tally]:
    """Run the prepared notebook once in a new kernel; write the output as cells finish.

    Return the exit code, the error that stopped it (type and message) and how many cells ran.
    """
    client_class = durable_client_class()
    import nbformat
    from nbclient.exceptions import CellExecutionError, DeadKernelError

    labels = prepared.labels()
    shown = progress_for(len(labels), prepared.run_name, say, stream)
    started: dict[int, float] = {}

    def write() -> None:
        if target is not None:
            # Written beside it, then renamed over it: a crash mid-write leaves the previous version whole.
            partial = target.with_name(f".{target.name}.partial")
            nbformat.write(prepared.output(), str(partial))
            os.replace(partial, target)

    def starting(cell: Any, cell_index: int) -> None:
        if cell_index in labels:
            started[cell_index] = time.monotonic()
            shown.started(labels[cell_index])

    def finished(cell: Any, cell_index: int, execute_reply: Any) -> None:
        if cell_index not in labels or (execute_reply or {}).get("content", {}).get("status") != "ok":
            return  # a cell that failed or paused at a gate is not done: the run stops, and says why
        notes = client.notes(cell_index)
        restored = any(note["kind"] == "restored" for note in notes)
        warnings = [note["text"] for note in notes if note["level"] == "warning"]
        shown.finished(
            labels[cell_index], restored, time.monotonic() - started.get(cell_index, time.monotonic()), warnings
        )
        write()

    with ipc_sockets() as sockets:
        client = client_class(
            prepared.notebook,
            kernel_name=kernel,
            timeout=cell_timeout,
            resources={"metadata": {"path": str(prepared.source.parent)}},
            on_cell_execute=starting,
            on_cell_executed=finished,
            config=kernel_config(sockets),
        )
        record = _run_of(prepared)
        keeper: AbstractContextManager[Any] = (
            LeaseKeeper(prepared.store, record.run_id) if record is not None else nullcontext()
        )
        try:
            with keeper:
                client.execute(env=prepared.handover().environment())
        except CellExecutionError as error:
            shown.close()
            write()
            if error.ename == "GatePending":
                return EXIT_PAUSED, None, shown.tally
            say(f"a cell failed ({error.ename}: {error.evalue}); fix it and run this command again to resume")
            return EXIT_FAILED, (error.ename, error.evalue), shown.tally
        except DeadKernelError as error:
            shown.close()
            write()
            say(f"the kernel died ({error}); run this command again to resume")
            return EXIT_FAILED, ("DeadKernelError", str(error)), shown.tally
        except BaseException:
            shown.close()
            raise
    shown.close()
    write()
    say(f"completed run {prepared.run_name}: {len(labels)} cells, {shown.tally.summary()}")
    return EXIT_COMPLETED, None, shown.tally


def _run_of(prepared: NotebookRun) -> RunRecord | None:
    """The run of this notebook and these parameters (its key), the newest if several."""
    from ..store import resolve_store

    runs = run_sync(resolve_store(prepared.store).list_runs(prepared.run_name))
    return next((run for run in runs if run.idempotency_key == prepared.run_key), None)


def _waiting_gate(prepared: NotebookRun, run_id: str, given_store: str | None) -> dict[str, str]:
    """The gate the run waits at, and the command that approves it from a shell (with the store as given)."""
    from ..store import resolve_store

    pending = run_sync(resolve_store(prepared.store).pending_interrupts(run_id))
    store = ["--store", given_store] if given_store is not None else []
    gate = {"node": pending[0].node_id, "reason": pending[0].reason} if pending else {"node": "", "reason": ""}
    return {**gate, "decide": shlex.join(["durable-nb", "approve", run_id, *store])}


def _await_decision(prepared: NotebookRun, run_id: str, poll: float = 0.5) -> bool:
    """Wait until the gate is decided (polling the store); True to continue, False if it was cancelled."""
    from ..engine.runs.calls import get_run

    while True:
        status = get_run(run_id, store=prepared.store).status
        if status != "paused":
            return status != "cancelled"
        time.sleep(poll)
