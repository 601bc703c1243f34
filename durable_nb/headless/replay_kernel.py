"""One fork of a replay, run in a kernel of its own: the cells before the fork point restored, the rest run.

The notebook the kernel runs is made from the store alone: each cell is the code the replayed run
committed, behind the ``%%durable NODE`` line it was committed with (its retries, timeout and
excluded names too), so that a cell committed in the fork (before a crash)
is restored and the others run. The fork's name, key and store reach the kernel in its environment
(``notebook.handover``), never as code; the values the fork sets are in the fork itself.
"""

from __future__ import annotations

import math
import os
from typing import Any

from .._loop import run_sync
from ..engine.cells.replay_runs import IN_REPLAY_VARIABLE
from ..engine.cells.replays import SETTLED, ReplayCell
from ..model import RunRecord, RunStatus
from ..notebook.cell_names import is_node_name
from ..notebook.handover import ATTACH_CODE, Handover
from .client import durable_client_class
from .kernels import ipc_sockets, kernel_config
from .notebook_run import END_CODE

__all__ = ["magic_line", "replay_fork", "replay_notebook"]


def replay_notebook(cells: list[ReplayCell]) -> Any:
    """The notebook a fork's kernel runs: attach, every cell behind its ``%%durable`` line, end the run."""
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.cells.append(nbformat.v4.new_code_cell(ATTACH_CODE))
    for cell in cells:
        notebook.cells.append(nbformat.v4.new_code_cell(f"{magic_line(cell)}\n{cell.source}"))
    notebook.cells.append(nbformat.v4.new_code_cell(END_CODE))
    return notebook


def magic_line(cell: ReplayCell) -> str:
    """The ``%%durable`` line a replayed cell runs behind: its name and the options it was committed with.

    The name and options come from the store; each is checked to be what durable_nb records (a name,
    whole numbers, identifiers) so that nothing else ever becomes part of a magic line.
    """
    if not is_node_name(cell.node):
        raise ValueError(f"{cell.node!r} is not a cell name durable_nb makes")
    words = ["%%durable", cell.node]
    if cell.replay:
        words.append("--replay")
    options = cell.options
    retries = options.get("retries")
    if retries is not None:
        if type(retries) is not int or retries < 0:
            raise ValueError(f"cell {cell.node!r} was committed with retries={retries!r}, which no cell takes")
        words += ["--retries", str(retries)]
    timeout = options.get("timeout")
    if timeout is not None:
        if type(timeout) not in (int, float) or not (math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"cell {cell.node!r} was committed with timeout={timeout!r}, which no cell takes")
        words += ["--timeout", repr(float(timeout))]
    exclude = options.get("exclude")
    if exclude:
        if not isinstance(exclude, list) or not all(isinstance(n, str) and n.isidentifier() for n in exclude):
            raise ValueError(f"cell {cell.node!r} was committed with exclude={exclude!r}, which names no variables")
        words += ["--exclude", ",".join(exclude)]
    return " ".join(words)


def replay_fork(store: str, run_id: str, kernel: str = "python3", cwd: str | None = None) -> RunStatus:
    """Run the fork ``run_id`` of a replay in a new kernel until it completes, fails or pauses; return its status.

    A fork already settled, or held by a live kernel, is left alone.
    """
    from ..engine.cells.replays import replay_cells
    from ..engine.runs.ownership import owner_alive
    from ..engine.state.values import ValueCodec
    from ..store import resolve_store
    from ..store.secret import load_secret

    resolved = resolve_store(store, existing=True)
    fork: RunRecord = run_sync(resolved.get_run(run_id))
    if fork.status in SETTLED - {RunStatus.FAILED, RunStatus.CANCELLED}:
        return fork.status
    if fork.status is RunStatus.RUNNING and owner_alive(fork.run_id, fork.owner, fork.lease_until):
        return fork.status  # another kernel replays it now
    cells = run_sync(replay_cells(resolved, ValueCodec(resolved, load_secret()), fork))
    _execute(replay_notebook(cells), Handover(fork.name, fork.idempotency_key, store), kernel, cwd)
    return run_sync(resolved.get_run(run_id)).status


def _execute(notebook: Any, handover: Handover, kernel: str, cwd: str | None) -> None:
    from nbclient.exceptions import CellExecutionError, DeadKernelError

    environment = handover.environment()
    environment[IN_REPLAY_VARIABLE] = "1"
    with ipc_sockets() as sockets:
        client = durable_client_class()(
            notebook,
            kernel_name=kernel,
            resources={"metadata": {"path": cwd or os.getcwd()}},
            config=kernel_config(sockets),
        )
        try:
            client.execute(env=environment)
        except (CellExecutionError, DeadKernelError):
            pass  # the store says how the fork ended: failed, paused at a gate, or left for the next try
