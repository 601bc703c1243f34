"""What a finished %%durable cell hands to the engine, read from the shell it ran in."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..engine.cells import CellOutcome, CellRun
from ..errors import SerializationError
from ..model import Blob
from ..store import codec
from .capture import open_figure_ids
from .cellcode import CellCode
from .effects import attributes_set, result_blob, unrecorded_calls
from .settings import SettingsWatch

__all__ = ["cell_outcome"]

_HIDDEN_NAMES = {"In", "Out", "get_ipython", "exit", "quit", "_", "__", "___"}


def hidden_name(shell: Any, name: str) -> bool:
    if name in _HIDDEN_NAMES or name in getattr(shell, "user_ns_hidden", {}):
        return True
    # IPython's history names: _i, _ii, _i7, _7 …
    return (name.startswith("_i") and name[2:].isdigit()) or (name.startswith("_") and name[1:].isdigit())


def _storable(shell: Any, exclude: frozenset[str], name: str) -> bool:
    return name not in exclude and not hidden_name(shell, name)


def cell_outcome(
    shell: Any,
    cell_run: CellRun,
    node: str,
    cell: CellCode,
    outputs: list[dict[str, Any]],
    before: dict[str, int],
    watch: SettingsWatch,
    value: Any,
    exclude: frozenset[str],
    replay: bool,
    recipe: Callable[[str], dict[str, Any] | None] | None = None,
) -> CellOutcome:
    """Gather what a finished cell hands to the engine: the names it bound or deleted, its settings,
    module attributes and shown value."""
    namespace = shell.user_ns
    storable = functools.partial(_storable, shell, exclude)
    bound = frozenset(n for n, v in namespace.items() if before.get(n) != id(v) and storable(n))
    deleted = sorted(n for n in before if n not in namespace and storable(n))
    extra: dict[str, Any] = {}
    blobs: list[Blob] = []
    unrecorded, called = unrecorded_calls(namespace, cell.setting_calls)
    settings = watch.changes(called)
    attributes, effects = attributes_set(namespace, cell.module_attributes)
    if settings or attributes:
        try:
            effects_of_cell = {"settings": settings, "attributes": attributes}
            blob = codec.encode(effects_of_cell, cell_run.values.secret, "settings")
        except SerializationError as error:
            effects.append(f"settings that cannot be stored ({error})")
        else:
            blobs.append(blob)
            extra["settings"] = blob.hash
    effects += unrecorded
    if effects and not replay:
        extra["effects"] = effects
    if cell.magics:
        extra["magics"] = [list(m) for m in cell.magics]
    if replay:
        extra["replay"] = True
    result = result_blob(cell, value, cell_run.values.secret)
    if isinstance(result, str):
        extra["result_name"] = result
    elif result is not None:
        blobs.append(result)
        extra["result"] = result.hash
    return CellOutcome(
        node,
        namespace,
        touched=cell.names | bound,
        storable=storable,
        deleted=deleted,
        outputs=outputs,
        source_hash=cell.source_hash,
        duration=0.0,
        bound=bound,
        open_figures=open_figure_ids(),
        extra=extra,
        blobs=blobs,
        recipe=recipe,
    )
