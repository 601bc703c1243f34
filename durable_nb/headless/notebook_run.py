"""``durable-nb run-notebook``: run any notebook headless with every code cell durable, and resume it.

The notebook is not edited on disk. In the copy that runs, each code cell gets a ``%%durable``
line (cells already marked keep theirs; a cell tagged ``not-durable`` runs plain), a first cell
attaches the kernel to the notebook's run, and parameters are injected after the cell tagged
``parameters``, as papermill does. The run's name, key and store reach the kernel as data, in its
environment (see ``notebook.handover``), never as code; the kernel listens on Unix sockets. The
run is found again by the notebook's path and parameters (or ``--run``): running the same command
after a crash restores what committed and executes the rest. The output notebook, with the
original sources, is written as cells finish.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._loop import run_sync
from ..errors import ConfigurationError, InvalidNotebookRun
from ..model import RunRecord
from ..notebook.handover import ATTACH_CODE, Handover
from ..store.url import parse_url, resolve_url
from .inputs import check_output_path, check_parameters, check_run_name, read_notebook
from .kernels import ipc_sockets, kernel_config
from .progress import Tally, progress_for

__all__ = [
    "END_CODE",
    "EXIT_COMPLETED",
    "EXIT_FAILED",
    "EXIT_PAUSED",
    "NotebookOutcome",
    "NotebookRun",
    "cell_name",
    "cell_names",
    "durable_source",
    "fork_last_run",
    "kernel_store",
    "run_key",
    "run_notebook",
]

EXIT_COMPLETED, EXIT_FAILED, EXIT_PAUSED = 0, 1, 3
END_CODE = "%durable end"
PLAIN_TAG, PARAMETERS_TAG, INJECTED_TAG = "not-durable", "parameters", "injected-parameters"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
_RESERVED_TAGS = {PLAIN_TAG, PARAMETERS_TAG, INJECTED_TAG}


def cell_name(index: int, source: str, tags: list[str]) -> str:
    """A cell's stable name: its first tag that is a name, else its position and a digest of its source.

    The parameters cells are named for what they are, so that a fork finds them in another run.
    """
    for tag in tags:
        if tag not in _RESERVED_TAGS and _NAME.match(tag):
            return tag
    for tag in (INJECTED_TAG, PARAMETERS_TAG):
        if tag in tags:
            return tag
    return _positional(index, source)


def _positional(index: int, source: str) -> str:
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()[:6]
    return f"cell{index}_{digest}"


def cell_names(cells: list[Any]) -> dict[int, str]:
    """The name of each code cell, by position; a name met again falls back to position and digest."""
    names: dict[int, str] = {}
    for index, cell in enumerate(cells):
        if cell.cell_type != "code":
            continue
        source = str(cell.source)
        name = cell_name(index, source, list(cell.get("metadata", {}).get("tags", [])))
        names[index] = _positional(index, source) if name in names.values() else name
    return names


def durable_source(cell: Any, name: str) -> str:
    """Return the source a code cell runs with: behind a ``%%durable NAME`` line unless it must run as written."""
    tags = list(cell.get("metadata", {}).get("tags", []))
    text = str(cell.source)
    stripped = text.lstrip()
    if PLAIN_TAG in tags or not stripped or stripped.startswith("%%"):
        return text  # marked plain, empty, already durable, or owned by another cell magic
    return f"%%durable {name}\n{text}"


def kernel_store(store: str | None) -> str:
    """The store URL a kernel opens: ``store`` (else $DURABLE_NB_STORE, else the default), a SQLite path made
    absolute, since the kernel works in the notebook's folder. An unknown URL is refused here, before any kernel."""
    url = resolve_url(store)
    parsed = parse_url(url)
    if parsed.is_memory:
        raise InvalidNotebookRun(
            "A notebook's run cannot live in an in-memory store (its kernel is another process): "
            "give --store sqlite:///path/to/runs.db or a postgresql:// URL."
        )
    if parsed.scheme == "sqlite" and parsed.path is not None:
        return "sqlite:///" + os.path.abspath(parsed.path)
    return url


def run_key(path: Path, parameters: dict[str, Any]) -> str:
    """The key a notebook's run is found by: its path and its parameters."""
    identity = json.dumps([str(path), parameters], sort_keys=True, default=repr)
    return hashlib.sha256(identity.encode()).hexdigest()[:24]


def _tagged(cells: list[Any], tag: str) -> int:
    return next((i for i, c in enumerate(cells) if tag in c.get("metadata", {}).get("tags", [])), -1)


@dataclass
class NotebookRun:
    """A notebook prepared to run durably: the copy that runs, and how to write the output."""

    source: Path
    run_name: str
    run_key: str
    store: str
    parameters: dict[str, Any] = field(default_factory=dict)
    notebook: Any = None
    originals: dict[int, str] = field(default_factory=dict)
    parameters_at: int = 1  # the first cell of the copy that runs whose outcome the parameters may change

    @classmethod
    def prepare(
        cls,
        path: str | Path,
        parameters: dict[str, Any] | None = None,
        run: str | None = None,
        store: str | None = None,
        kernel: str | None = None,
    ) -> NotebookRun:
        """Read ``path`` and build the durable copy (the file itself is never changed).

        Everything given is checked first: a bad path, run name, parameter or store URL is refused
        with ``InvalidNotebookRun`` before any kernel starts.
        """
        values = dict(parameters or {})
        check_parameters(values)
        if run is not None:
            check_run_name(run, "give another --run NAME")
        url = kernel_store(store)
        notebook = read_notebook(path)  # a regular file, or refused unopened
        source = Path(path).resolve()
        name = run if run is not None else check_run_name(source.stem, "give the run a name with --run NAME")
        prepared = cls(source, name, run_key(source, values), url, values, notebook)
        prepared._inject(kernel)
        prepared._make_durable()
        return prepared

    def _inject(self, kernel: str | None) -> None:
        """Inject the parameters with papermill's own code: the same cell, place and literals as papermill."""
        if self.parameters:
            try:
                from papermill.parameterize import parameterize_notebook
            except ImportError as error:
                raise ConfigurationError(
                    "Parameters are injected as papermill does, by papermill: pip install 'durable-nb[headless]'."
                ) from error
            metadata = self.notebook.metadata
            metadata.setdefault("papermill", {})  # where papermill records the parameters it injected
            for cell in self.notebook.cells:
                cell.metadata.setdefault("tags", [])  # as papermill's loader leaves them, and its code expects
            spec = metadata.get("kernelspec", {})
            language = spec.get("language") or metadata.get("language_info", {}).get("name") or "python"
            self.notebook = parameterize_notebook(
                self.notebook, self.parameters, kernel_name=kernel or spec.get("name") or "python3", language=language
            )
        cells = self.notebook.cells
        injected = _tagged(cells, INJECTED_TAG)
        where = injected if injected >= 0 else _tagged(cells, PARAMETERS_TAG) + 1
        self.parameters_at = where + 1  # in the copy that runs, after the set-up cell

    def _make_durable(self) -> None:
        import nbformat

        for index, name in cell_names(self.notebook.cells).items():
            cell = self.notebook.cells[index]
            self.originals[index] = cell.source
            cell.source = durable_source(cell, name)
        setup = nbformat.v4.new_code_cell(ATTACH_CODE, metadata={"tags": ["durable-nb-setup"]})
        self.notebook.cells.insert(0, setup)
        self.originals = {index + 1: text for index, text in self.originals.items()}
        # Once every cell ran, the run is completed (a rerun of a completed run says so, and restores).
        self.notebook.cells.append(nbformat.v4.new_code_cell(END_CODE, metadata={"tags": ["durable-nb-teardown"]}))

    def handover(self) -> Handover:
        """The run the kernel attaches to, handed over as data in its environment."""
        return Handover(self.run_name, self.run_key, self.store)

    def labels(self) -> dict[int, str]:
        """What the progress calls each code cell of the copy that runs (the set-up cell excluded)."""
        found = {}
        for index in self.originals:
            first = self.notebook.cells[index].source.split("\n", 1)[0].split()
            durable = len(first) > 1 and first[0] == "%%durable"
            found[index] = first[1] if durable else f"cell {index} (plain)"
        return found

    def output(self) -> Any:
        """The notebook as it ran, with each cell's original source and without the set-up cell."""
        import copy

        written = copy.deepcopy(self.notebook)
        for index, text in self.originals.items():
            written.cells[index].source = text
        written.cells.pop()
        written.cells.pop(0)
        return written


def fork_last_run(prepared: NotebookRun) -> str | None:
    """Branch the notebook's last run (of another key) just before its parameters cell, as this key's run.

    Cells above the parameters cell are then restored from that run, and the rest run with the
    new parameters. Nothing happens when a run of this key exists (it resumes) or none ran before.
    """
    return run_sync(_afork_last_run(prepared))


async def _afork_last_run(prepared: NotebookRun) -> str | None:
    from ..engine.cells import CellRun
    from ..engine.values import ValueCodec
    from ..model import RunKind
    from ..store import resolve_store
    from ..store.secret import load_secret

    store = resolve_store(prepared.store)
    runs = [run for run in await store.list_runs(prepared.run_name) if run.kind is RunKind.NOTEBOOK]
    if not runs or any(run.idempotency_key == prepared.run_key for run in runs):
        return None
    last = await CellRun.open(store, ValueCodec(store, load_secret()), runs[0])  # newest first
    labels = prepared.labels()
    for index in sorted(i for i in labels if i >= prepared.parameters_at):
        if await last.lookup(labels[index]) is not None:
            forked = await last.fork_before(labels[index], key=prepared.run_key, owned=False)
            return forked.run_id
    return None  # it committed nothing from the parameters on: a new run does the same


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
) -> NotebookOutcome:
    """Run a notebook durably; its outcome's exit code is 0 (completed), 1 (a cell failed) or 3 (paused at a gate).

    ``progress`` is a stream for a progress bar (used when it is a terminal); otherwise each
    finished cell is one line through ``say``. ``fork``: parameters not run before branch the
    notebook's last run at the parameters cell instead of starting from the first cell.
    """
    target = check_output_path(output) if output is not None else None
    while True:
        prepared = NotebookRun.prepare(path, parameters, run, store, kernel)
        if fork:
            forked = fork_last_run(prepared)
            if forked is not None:
                say(f"forked the last run of {prepared.run_name} at the parameters cell: run {forked}")
            fork = False  # once: after a gate the same run goes on
        code, failure, tally = _execute(prepared, target, kernel, say, cell_timeout, progress)
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


def _client_class() -> type:
    try:
        from nbclient import NotebookClient
    except ImportError as error:
        raise ConfigurationError(
            "Running notebooks headless needs its extra: pip install 'durable-nb[headless]'."
        ) from error

    from .notes import NoteSeparator

    class DurableClient(NoteSeparator, NotebookClient):  # type: ignore[misc]
        """nbclient's client, with durable_nb's notes kept out of the outputs."""

    return DurableClient


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
    client_class = _client_class()
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
        try:
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
    from ..engine.calls import get_run

    while True:
        status = get_run(run_id, store=prepared.store).status
        if status != "paused":
            return status != "cancelled"
        time.sleep(poll)
