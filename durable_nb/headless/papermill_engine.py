"""A papermill engine: ``papermill --engine durable IN OUT -p …`` runs the notebook with every cell durable.

papermill injects the parameters and writes the output notebook as it always does; this engine
attaches the kernel to the notebook's run (found again by the input path and the parameters,
in ``$DURABLE_NB_STORE`` or the default store) before the first cell and runs each code cell
behind a ``%%durable`` line, so that running the same command again after a crash restores what
committed and executes the rest. The output notebook keeps the original sources. papermill
imports this module only when the engine is asked for.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from nbclient.util import run_sync
from papermill.clientwrap import PapermillNotebookClient
from papermill.engines import NBClientEngine
from papermill.log import logger
from papermill.utils import merge_kwargs, remove_args

from .notebook_run import END_CODE, attach_code, cell_names, durable_source, run_key
from .notes import NoteSeparator
from .streams import StreamJoiner

__all__ = ["DurableEngine"]


class DurableNotebookClient(NoteSeparator, StreamJoiner, PapermillNotebookClient):  # type: ignore[misc]
    """papermill's client, attaching the run first and running each code cell durably.

    durable_nb's notes go to papermill's log, not into the output notebook, and consecutive outputs
    of a stream are joined, so that a resumed run's output reads as an uninterrupted one's.
    """

    def __init__(self, nb_man: Any, attach: str, **kwargs: Any) -> None:
        super().__init__(nb_man, **kwargs)
        self.attach = attach

    def papermill_execute_cells(self) -> None:
        # Attach the kernel to the run before the first cell, without a cell of its own.
        self._quietly(self.attach, "attach the run")
        self.names = cell_names(self.nb.cells)
        super().papermill_execute_cells()
        # papermill stops at a failed cell without raising, and marks the notebook: the run is
        # completed only when every cell ran.
        if not self.nb.metadata.get("papermill", {}).get("exception"):
            self._quietly(END_CODE, "complete the run")

    def _quietly(self, code: str, what: str) -> None:
        """Run durable_nb's own code in the kernel, outside any cell of the notebook."""
        reply = run_sync(self.kc.execute_interactive)(code, store_history=False, timeout=120)
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
            for note in self.notes(cell_index):
                (logger.warning if note["level"] == "warning" else logger.info)(f"durable_nb: {note['text']}")


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
        source = Path(str(kwargs.get("input_path") or "notebook.ipynb")).resolve()
        attach = attach_code(source.stem, run_key(source, parameters), os.environ.get("DURABLE_NB_STORE"))
        kwargs = remove_args(["input_path"], **kwargs)
        safe = remove_args(["timeout", "startup_timeout"], **kwargs)
        final = merge_kwargs(
            safe,
            timeout=execution_timeout if execution_timeout else kwargs.get("timeout"),
            startup_timeout=start_timeout,
            kernel_name=kernel_name,
            log=logger,
            log_output=log_output,
            stdout_file=stdout_file,
            stderr_file=stderr_file,
        )
        return DurableNotebookClient(nb_man, attach, **final).execute()
