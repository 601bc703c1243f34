"""The durable copy of a notebook that ``durable-nb run-notebook`` runs, and the run it belongs to.

The notebook is not edited on disk. In the copy that runs, each code cell gets a ``%%durable``
line (cells already marked keep theirs; a cell tagged ``not-durable`` runs plain), a first cell
attaches the kernel to the notebook's run, and parameters are injected after the cell tagged
``parameters``, as papermill does. The run's name, key and store reach the kernel as data, in its
environment (see ``notebook.handover``), never as code. The run is found again by the notebook's
path and parameters (or ``--run``): running the same command after a crash restores what
committed and executes the rest (``execution`` runs the copy). The output notebook keeps the
original sources.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._loop import run_sync
from ..errors import ConfigurationError, InvalidNotebookRun
from ..notebook import cell_names as names
from ..notebook.all_cells import runs_durably
from ..notebook.cell_names import INJECTED_TAG, PARAMETERS_TAG, PLAIN_TAG
from ..notebook.handover import ATTACH_CODE, Handover, run_key
from ..store.url import resolve_url, url_for_other_processes
from .inputs import check_parameters, check_run_name, read_notebook

__all__ = [
    "END_CODE",
    "NotebookRun",
    "cell_name",
    "cell_names",
    "durable_source",
    "fork_last_run",
    "kernel_store",
    "run_key",
]

END_CODE = "%durable end"


def cell_name(index: int, source: str, tags: list[str], cell_id: object = None) -> str:
    """A cell's stable name: its first tag that is a name, else its cell id, else its position and a digest.

    The parameters cells are named for what they are, so that a fork finds them in another run. A
    kernel in ``%durable run NAME --all`` names cells the same way, so one run moves between the two.
    """
    return names.cell_name(index, source, tags, cell_id)


def cell_names(cells: list[Any]) -> dict[int, str]:
    """The name of each code cell, by position; a name met again falls back to position and digest."""
    found: dict[int, str] = {}
    for index, cell in enumerate(cells):
        if cell.cell_type != "code":
            continue
        source = str(cell.source)
        name = cell_name(index, source, list(cell.get("metadata", {}).get("tags", [])), cell.get("id"))
        found[index] = names.positional_name(index, source) if name in found.values() else name
    return found


def durable_source(cell: Any, name: str) -> str:
    """Return the source a code cell runs with: behind a ``%%durable NAME`` line unless it must run as written."""
    tags = list(cell.get("metadata", {}).get("tags", []))
    text = str(cell.source)
    if PLAIN_TAG in tags or not runs_durably(text):
        # Marked plain, empty, already durable, owned by another cell magic, or driving durable_nb itself
        # (the notebook's own %durable run NAME --all line): as a kernel in --all mode runs them.
        return text
    return f"%%durable {name}\n{text}"


def kernel_store(store: str | None) -> str:
    """The store URL a kernel opens: ``store`` (else $DURABLE_NB_STORE, else the default), a SQLite path made
    absolute, since the kernel works in the notebook's folder. An unknown URL is refused here, before any kernel."""
    shared = url_for_other_processes(resolve_url(store))
    if shared is None:
        raise InvalidNotebookRun(
            "A notebook's run cannot live in an in-memory store (its kernel is another process): "
            "give --store sqlite:///path/to/runs.db or a postgresql:// URL."
        )
    return shared


# A key given to a run (a schedule's: its id and due time); other runs are keyed by path and parameters.
_KEY = re.compile(r"^[A-Za-z0-9_.:+-]{1,128}$")


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
    claim: str | None = None  # the owner token the kernel takes the run from (this process's claim)

    @classmethod
    def prepare(
        cls,
        path: str | Path,
        parameters: dict[str, Any] | None = None,
        run: str | None = None,
        store: str | None = None,
        kernel: str | None = None,
        key: str | None = None,
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
        if key is not None and (not isinstance(key, str) or not _KEY.match(key)):
            raise InvalidNotebookRun(f"--key {key!r:.80} is no run key: give letters, digits and '_.:+-' (up to 128).")
        prepared = cls(source, name, key or run_key(source, values), url, values, notebook)
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
        return Handover(self.run_name, self.run_key, self.store, self.claim)

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
    from ..engine.cells.cell_run import CellRun
    from ..engine.forks.forking import create_fork
    from ..engine.state.values import ValueCodec
    from ..model import RunKind
    from ..store import resolve_store
    from ..store.secret import load_secret

    store = resolve_store(prepared.store)
    # A replay's fork is not the notebook's last run: it replays someone's run with other values.
    runs = [
        run
        for run in await store.list_runs(prepared.run_name)
        if run.kind is RunKind.NOTEBOOK and "replay" not in run.meta
    ]
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
