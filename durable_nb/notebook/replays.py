"""``dnb.replay``: fork a notebook run just before one cell, with other values, and run that cell and
the later ones in background kernels, while the kernel that asked stays where it is.

This is the front half: which run (the kernel's own by default), the bars under the cell, waiting.
The engine makes the forks and starts the process that replays them (``engine.cells.replay_runs``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..engine.cells.replay_runs import IN_REPLAY_VARIABLE, Replay, start_replay
from ..errors import InvalidReplay

if TYPE_CHECKING:
    from ..engine.runs.run import Run

__all__ = ["replay"]


def replay(
    at: str,
    set: Mapping[str, Any] | None = None,
    sweep: Mapping[str, Sequence[Any]] | None = None,
    run: str | None = None,
    wait: bool = False,
    executor: Any = None,
    *,
    store: Any = None,
) -> list[Run]:
    """Fork the run just before cell ``at`` once per combination of values; replay the rest in background kernels.

    The cells before ``at`` are not run again: each fork restores them. The same call again
    returns the same forks (and continues those a crash stopped). In a notebook, a bar per fork
    shows its progress.

    Args:
        at: The cell to replay from (its name, as ``%%durable NAME`` or the notebook gave it).
        set: Values every fork takes, by variable name; each must have the type of the value the
            run had.
        sweep: Lists of values to try, by variable name: one fork per combination.
        run: The run to fork (default: the run this kernel is attached to).
        wait: Block until every fork finished, failed or paused at a gate.
        executor: A ``concurrent.futures`` executor or a Dask client to run the forks on
            (default: a process of their own, as many forks at once as cores).
        store: The store's URL or a Store (default: the store of this kernel's run).

    Returns:
        The forks, one per combination, as run handles (``status`` as the store says now).

    Raises:
        InvalidReplay: Nothing is created: an unknown cell, a value of another type, an empty
            sweep, a run with no committed cell, or no run attached and none given.
        RunNotFound: No run has the id given.

    The what-if tutorial of the documentation runs it on a notebook, forks and all.
    """
    if os.environ.get(IN_REPLAY_VARIABLE):
        return []  # a replayed cell asking for a replay: the kernel that asked first owns the replays
    if run is None:
        run, attached = _attached()
        if run is not None and store is not None and not _same_store(store, attached):
            run = None  # this kernel's run lives in another store than the one named
        if run is None:
            raise InvalidReplay(
                "No run to replay: this kernel is attached to no run (in the store named, if one is). Attach it "
                "with %durable run NAME --all and run the notebook's cells, or give run=RUN_ID."
            )
        store = store if store is not None else attached
    started = start_replay(store, run, at, set, sweep, executor)
    _say_changed(started)
    bars = _show_progress(started, wait)
    if wait:
        started.wait(on_progress=bars.update if bars is not None else None)
    return started.runs()


def _shell() -> Any:
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def _same_store(given: Any, attached: Any) -> bool:
    """Whether the store named in the call is the one this kernel's run lives in."""
    from ..store import resolve_store

    return bool(resolve_store(given, existing=True).url == getattr(attached, "url", None))


def _attached() -> tuple[str | None, Any]:
    """The run this kernel is attached to and its store (None, None outside a kernel or unattached)."""
    shell = _shell()
    if shell is None:
        return None, None
    from .session import session_for

    session = session_for(shell)
    if session.cell_run is None:
        return None, session.store
    return session.cell_run.run_id, session.cell_run.store


def _say_changed(started: Replay) -> None:
    """Warn (in a kernel whose notebook file is known) of replayed cells whose code there differs from the run's."""
    shell = _shell()
    if shell is None:
        return
    from .notebook_tags import notebook_path
    from .session import session_for

    path = notebook_path(shell.user_ns)
    if path is None or not path.is_file():
        return
    try:
        current = _notebook_hashes(shell, path)
    except Exception:  # noqa: BLE001 - an unreadable notebook file only means there is nothing to compare
        return
    from .cellcode import analyze

    replayed = set(started.replayed)
    changed = [
        cell.node
        for cell in started.plan.cells
        if cell.node in replayed and current.get(cell.node) != analyze(cell.source).source_hash
    ]
    if changed:
        session_for(shell).notes.warn(
            f"{', '.join(changed)} in {path.name} differ{'s' if len(changed) == 1 else ''} from the code run "
            f"{started.plan.run.run_id} committed (or are not there): the replay runs the committed code",
            "replay",
        )


def _notebook_hashes(shell: Any, path: Any) -> dict[str, str]:
    """The code hash of each code cell of the notebook file, by the name its run gives it."""
    import nbformat

    from .cell_names import cell_name
    from .cellcode import analyze

    notebook = nbformat.read(str(path), as_version=4)
    found: dict[str, str] = {}
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        source = str(cell.source)
        name = cell_name(index, source, list(cell.get("metadata", {}).get("tags", [])), cell.get("id"))
        if source.startswith("%%durable "):
            first, _, source = source.partition("\n")
            words = first.split()
            name = words[1] if len(words) > 1 else name
        try:
            found.setdefault(name, analyze(shell.transform_cell(source)).source_hash)
        except SyntaxError:
            continue
    return found


def _show_progress(started: Replay, wait: bool) -> Any:
    """Show a bar per fork under the cell (in a notebook with ipywidgets), kept current from a thread."""
    if _shell() is None:
        return None
    try:
        from ..widgets.replay_bars import ReplayBars
    except ImportError:
        return None
    from IPython.display import display

    bars = ReplayBars(started.progress())
    display(bars)
    if not wait:
        bars.follow(started.progress, started.finished)
    return bars
