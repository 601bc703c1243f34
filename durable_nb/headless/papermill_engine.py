"""A papermill engine: ``papermill --engine durable IN OUT -p …`` runs the notebook with every cell durable.

papermill injects the parameters and writes the output notebook as it always does; this engine
attaches the kernel to the notebook's run (found again by the input path and the parameters,
in ``$DURABLE_NB_STORE`` or the default store) before the first cell and runs each code cell
behind a ``%%durable`` line, so that running the same command again after a crash restores what
committed and executes the rest. The output notebook keeps the original sources. The run's name,
key and store reach the kernel as data in its environment, and the kernel listens on Unix
sockets. papermill imports this module only when the engine is asked for.
"""

from __future__ import annotations

import logging
import sys
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from nbclient.util import run_sync
from papermill.clientwrap import PapermillNotebookClient
from papermill.engines import NBClientEngine
from papermill.log import logger
from papermill.utils import merge_kwargs, remove_args
from tqdm.contrib.logging import logging_redirect_tqdm

from ..notebook.handover import ATTACH_CODE, Handover
from .inputs import check_parameters, check_run_name
from .kernels import ipc_sockets, kernel_config
from .notebook_run import END_CODE, cell_names, durable_source, kernel_store, run_key
from .notes import NoteSeparator, notes_in
from .streams import StreamJoiner

__all__ = ["DurableEngine"]


def _log(notes: list[dict[str, str]]) -> None:
    """Log durable_nb's notes (papermill's log; warnings as warnings)."""
    for note in notes:
        (logger.warning if note["level"] == "warning" else logger.info)(f"durable_nb: {note['text']}")


def _above_the_bar() -> AbstractContextManager[None]:
    """Console log lines written above papermill's progress bar, each on a line of its own, not on the bar's.

    tqdm's redirection clears the bar, writes the line and draws the bar again. It replaces only the
    console handlers (stdout, stderr) papermill's command line sets up; without one, nothing changes.
    """
    console = any(
        isinstance(handler, logging.StreamHandler) and handler.stream in (sys.stdout, sys.stderr)
        for handler in logging.root.handlers
    )
    return logging_redirect_tqdm() if console else nullcontext()


class DurableNotebookClient(NoteSeparator, StreamJoiner, PapermillNotebookClient):  # type: ignore[misc]
    """papermill's client, attaching the run first and running each code cell durably.

    durable_nb's notes go to papermill's log, not into the output notebook, and consecutive outputs
    of a stream are joined, so that a resumed run's output reads as an uninterrupted one's.
    """

    def papermill_execute_cells(self) -> None:
        # Attach the kernel to the run before the first cell, without a cell of its own.
        self._quietly(ATTACH_CODE, "attach the run")
        self.names = cell_names(self.nb.cells)
        super().papermill_execute_cells()
        # papermill stops at a failed cell without raising, and marks the notebook: the run is
        # completed only when every cell ran.
        if not self.nb.metadata.get("papermill", {}).get("exception"):
            self._quietly(END_CODE, "complete the run")

    def _quietly(self, code: str, what: str) -> None:
        """Run durable_nb's own code in the kernel, outside any cell of the notebook; log its notes."""
        shown: dict[str, list[dict[str, str]]] = {}

        def keep_notes(msg: dict[str, Any]) -> None:
            found = notes_in(msg)
            if found is not None:
                shown[found[0]] = found[1]

        reply = run_sync(self.kc.execute_interactive)(code, store_history=False, timeout=120, output_hook=keep_notes)
        _log([note for notes in shown.values() for note in notes])
        if reply["content"].get("status") != "ok":
            content = reply["content"]
            raise RuntimeError(f"durable_nb could not {what}: {content.get('ename')}: {content.get('evalue')}")

    def execute_cell(self, cell: Any, cell_index: int, *args: Any, **kwargs: Any) -> Any:
        if cell.cell_type != "code":
            return super().execute_cell(cell, cell_index, *args, **kwargs)
        original = cell.source
        cell.source = durable_source(cell, self.names[cell_index])
        try:
            return super().execute_cell(cell, cell_index, *args, **kwargs)
        finally:
            cell.source = original  # the output notebook shows what the author wrote
            _log(self.notes(cell_index))


class DurableEngine(NBClientEngine):  # type: ignore[misc]
    """papermill's nbclient engine, with every code cell durable and the run resumed on a rerun."""

    @classmethod
    def execute_managed_notebook(
        cls,
        nb_man: Any,
        kernel_name: str,
        log_output: bool = False,
        stdout_file: Any = None,
        stderr_file: Any = None,
        start_timeout: float = 60,
        execution_timeout: float | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run the parameterized notebook durably (papermill calls this)."""
        parameters = dict(nb_man.nb.metadata.get("papermill", {}).get("parameters") or {})
        # Checked before any kernel starts: papermill has pasted the parameters into a cell as the str of
        # each value, which is code of another value (or any code) for sets, bytes, dates and tagged objects.
        check_parameters(parameters)
        source = Path(str(kwargs.get("input_path") or "notebook.ipynb")).resolve()
        name = check_run_name(source.stem, "rename the notebook: its file name names the run")
        handover = Handover(name, run_key(source, parameters), kernel_store(None))  # $DURABLE_NB_STORE or the default
        kwargs = remove_args(["input_path"], **kwargs)
        safe = remove_args(["timeout", "startup_timeout"], **kwargs)
        with ipc_sockets() as sockets:
            final = merge_kwargs(
                safe,
                timeout=execution_timeout if execution_timeout else kwargs.get("timeout"),
                startup_timeout=start_timeout,
                kernel_name=kernel_name,
                log=logger,
                log_output=log_output,
                stdout_file=stdout_file,
                stderr_file=stderr_file,
                config=kernel_config(sockets),
            )
            with _above_the_bar():
                return DurableNotebookClient(nb_man, **final).execute(env=handover.environment())
