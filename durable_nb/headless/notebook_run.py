"""``durable-nb run-notebook``: run any notebook headless with every code cell durable, and resume it.

The notebook is not edited on disk. In the copy that runs, each code cell gets a ``%%durable``
line (cells already marked keep theirs; a cell tagged ``not-durable`` runs plain), a first cell
attaches the kernel to the notebook's run, and parameters are injected after the cell tagged
``parameters``, as papermill does. The run is found again by the notebook's path and parameters
(or ``--run``): running the same command after a crash restores what committed and executes the
rest. The output notebook, with the original sources, is written as cells finish.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._loop import run_sync
from ..errors import ConfigurationError, InvalidInput
from .progress import progress_for

__all__ = [
    "END_CODE",
    "EXIT_COMPLETED",
    "EXIT_FAILED",
    "EXIT_PAUSED",
    "NotebookRun",
    "attach_code",
    "cell_name",
    "cell_names",
    "durable_source",
    "fork_last_run",
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


def attach_code(run_name: str, run_key: str, store: str | None) -> str:
    """The code that attaches a kernel to the notebook's run (found again by its key)."""
    where = f" --store {store}" if store else ""
    return f"%load_ext durable_nb\n%durable run {run_name} --key {run_key}{where}"


def run_key(path: Path, parameters: dict[str, Any]) -> str:
    """The key a notebook's run is found by: its path and its parameters."""
    identity = json.dumps([str(path), parameters], sort_keys=True, default=repr)
    return hashlib.sha256(identity.encode()).hexdigest()[:24]


def _check_names(parameters: dict[str, Any]) -> None:
    for name in parameters:
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("__"):
            raise InvalidInput(f"A parameter's name is a Python identifier (not starting with '__'), not {name!r}.")


def _tagged(cells: list[Any], tag: str) -> int:
    return next((i for i, c in enumerate(cells) if tag in c.get("metadata", {}).get("tags", [])), -1)


@dataclass
class NotebookRun:
    """A notebook prepared to run durably: the copy that runs, and how to write the output."""

    source: Path
    run_name: str
    run_key: str
    store: str | None
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
        """Read ``path`` and build the durable copy (the file itself is never changed)."""
        import nbformat

        source = Path(path).resolve()
        try:
            notebook = nbformat.read(str(source), as_version=4)
        except (OSError, ValueError) as error:
            raise InvalidInput(f"Cannot read the notebook {path}: {error}.") from error
        values = dict(parameters or {})
        prepared = cls(source, run or source.stem, run_key(source, values), store, values, notebook)
        prepared._inject(kernel)
        prepared._make_durable()
        return prepared

    def _inject(self, kernel: str | None) -> None:
        """Inject the parameters with papermill's own code: the same cell, place and literals as papermill."""
        if self.parameters:
            _check_names(self.parameters)
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
        attach = attach_code(self.run_name, self.run_key, self.store)
        setup = nbformat.v4.new_code_cell(attach, metadata={"tags": ["durable-nb-setup"]})
        self.notebook.cells.insert(0, setup)
        self.originals = {index + 1: text for index, text in self.originals.items()}
        # Once every cell ran, the run is completed (a rerun of a completed run says so, and restores).
        self.notebook.cells.append(nbformat.v4.new_code_cell(END_CODE, metadata={"tags": ["durable-nb-teardown"]}))

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

    Cells above the parameters cell are then restored from that run (with the values any fork along
    it set), and the rest run with the new parameters. Nothing happens when a run of this key
    exists (it resumes) or none ran before.
    """
    return run_sync(_afork_last_run(prepared))


async def _afork_last_run(prepared: NotebookRun) -> str | None:
    from ..engine.cells import CellRun
    from ..engine.forking import create_fork
    from ..engine.values import ValueCodec
    from ..model import RunKind
    from ..store import resolve_store
    from ..store.secret import load_secret

    store = resolve_store(prepared.store)
    runs = [run for run in await store.list_runs(prepared.run_name) if run.kind is RunKind.NOTEBOOK]
    if not runs or any(run.idempotency_key == prepared.run_key for run in runs):
        return None
    values = ValueCodec(store, load_secret())
    last = await CellRun.open(store, values, runs[0])  # newest first
    labels = prepared.labels()
    for index in sorted(i for i in labels if i >= prepared.parameters_at):
        if await last.lookup(labels[index]) is not None:
            forked = await last.fork_before(labels[index], key=prepared.run_key, owned=False)
            return forked.run_id
    if await store.resume_point(last.run_id) is None:
        return None  # it holds nothing yet: a new run does the same
    # Nothing committed from the parameters on (a fork made above them, say): branch where it is.
    fork = await create_fork(store, values, last.run_id, idempotency_key=prepared.run_key)
    return fork.run.run_id


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
) -> int:
    """Run a notebook durably; return 0 (completed), 1 (a cell failed) or 3 (paused at a gate).

    ``progress`` is a stream for a progress bar (used when it is a terminal); otherwise each
    finished cell is one line through ``say``. ``fork``: parameters not run before branch the
    notebook's last run at the parameters cell instead of starting from the first cell.
    """
    target = Path(output) if output is not None else None
    while True:
        prepared = NotebookRun.prepare(path, parameters, run, store, kernel)
        if fork:
            forked = fork_last_run(prepared)
            if forked is not None:
                say(f"forked the last run of {prepared.run_name} at the parameters cell: run {forked}")
            fork = False  # once: after a gate the same run goes on
        code = _execute(prepared, target, kernel, say, cell_timeout, progress)
        if code != EXIT_PAUSED:
            return code
        run_id = _paused_run(prepared)
        say(
            f"Decide it with `durable-nb approve {run_id}` (or reject), the service or its approvals page, then "
            "run this command again" + (": waiting for the decision…" if wait else " (or add --wait).")
        )
        if not (wait and _await_decision(prepared, run_id)):
            return EXIT_PAUSED


def _client_class() -> type:
    try:
        from nbclient import NotebookClient
    except ImportError as error:
        raise ConfigurationError(
            "Running notebooks headless needs its extra: pip install 'durable-nb[headless]'."
        ) from error

    from .notes import NoteSeparator
    from .streams import StreamJoiner

    class DurableClient(NoteSeparator, StreamJoiner, NotebookClient):  # type: ignore[misc]
        """nbclient's client, with durable_nb's notes kept out of the outputs and streams joined as JupyterLab does."""

    return DurableClient


def _execute(
    prepared: NotebookRun,
    target: Path | None,
    kernel: str,
    say: Callable[[str], None],
    cell_timeout: float | None,
    stream: Any,
) -> int:
    """Run the prepared notebook once in a new kernel; write the output as cells finish."""
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
        if cell_index not in labels:
            return
        notes = client.notes(cell_index)
        restored = any(note["kind"] == "restored" for note in notes)
        warnings = [note["text"] for note in notes if note["level"] == "warning"]
        shown.finished(
            labels[cell_index], restored, time.monotonic() - started.get(cell_index, time.monotonic()), warnings
        )
        write()

    client = client_class(
        prepared.notebook,
        kernel_name=kernel,
        timeout=cell_timeout,
        resources={"metadata": {"path": str(prepared.source.parent)}},
        on_cell_execute=starting,
        on_cell_executed=finished,
    )
    try:
        client.execute()
    except CellExecutionError as error:
        shown.close()
        write()
        if error.ename == "GatePending":
            say(f"paused at a gate: {error.evalue}")
            return EXIT_PAUSED
        say(f"a cell failed ({error.ename}: {error.evalue}); fix it and run this command again to resume")
        return EXIT_FAILED
    except DeadKernelError as error:
        shown.close()
        write()
        say(f"the kernel died ({error}); run this command again to resume")
        return EXIT_FAILED
    except BaseException:
        shown.close()
        raise
    shown.close()
    write()
    say(f"completed run {prepared.run_name}: {len(labels)} cells, {shown.tally.summary()}")
    return EXIT_COMPLETED


def _paused_run(prepared: NotebookRun) -> str:
    """The run of this notebook and these parameters (its key), which paused at a gate."""
    from ..model import RunStatus
    from ..store import resolve_store

    store = resolve_store(prepared.store)
    paused = run_sync(store.list_runs(prepared.run_name, [RunStatus.PAUSED]))
    mine = [run for run in paused if run.idempotency_key == prepared.run_key]
    if not mine:
        raise ConfigurationError(f"The run of {prepared.run_name} paused, but no paused run is in the store.")
    return mine[0].run_id


def _await_decision(prepared: NotebookRun, run_id: str, poll: float = 0.5) -> bool:
    """Wait until the gate is decided (polling the store); True to continue, False if it was cancelled."""
    from ..engine.calls import get_run

    while True:
        status = get_run(run_id, store=prepared.store).status
        if status != "paused":
            return status != "cancelled"
        time.sleep(poll)
